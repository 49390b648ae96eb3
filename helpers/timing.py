"""Wall-clock measurement for notebook 04 and ``python -m helpers.bench``.

* :func:`interleaved` -- time several functions round-robin, so that slow drifts of the machine (turbo clocks,
  another process) hit every method alike; :func:`paired_ratios` compares two of them round by round, and
  :func:`load_warning` says when the machine is too busy to time anything.
* :func:`step_time` / :func:`cost_ratios` -- the cost of one KV-cached forward pass, and the two ratios that
  predict speculative decoding's speed on a CPU: c = draft step / expert step and r(γ) = expert forward over
  γ+1 tokens / expert step.
* :func:`expected_tokens` / :func:`predicted_speedup` / :func:`best_gamma` -- Leviathan et al. 2023, Eq. 1 and
  Thm 3.8, with the verification cost r(γ) instead of the paper's "verifying is free" (r = 1).
"""

from __future__ import annotations

import inspect
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache, PreTrainedModel


# ------------------------------------------------------------------------------------------- timing
def interleaved(fns: dict[str, Callable[[], object]], repeats: int, warmup: int = 1, *,
                on_run: Callable[[str], None] | None = None) -> dict[str, list[float]]:
    """Run every function once per round, round after round, and return the seconds of each timed run by name.

    The first ``warmup`` rounds are run but not recorded. ``on_run(name)`` is called after every run, outside
    the timed region (a progress bar, say).
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got repeats={repeats}, warmup={warmup}")
    times: dict[str, list[float]] = {name: [] for name in fns}
    for round_ in range(warmup + repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            elapsed = time.perf_counter() - start
            if round_ >= warmup:
                times[name].append(elapsed)
            if on_run is not None:
                on_run(name)
    return times


def median(values: Sequence[float]) -> float:
    """The median (the mean of the two middle values for an even count)."""
    if not values:
        raise ValueError("median of an empty sequence")
    return float(statistics.median(values))


@dataclass(frozen=True)
class Summary:
    """Median, minimum, maximum and count of a list of timings."""

    median: float
    min: float
    max: float
    n: int


def summarize(times: Sequence[float]) -> Summary:
    return Summary(median=median(times), min=float(min(times)), max=float(max(times)), n=len(times))


def paired_ratios(times: dict[str, list[float]], slow: str, fast: str) -> list[float]:
    """Per-round ratios ``slow / fast`` of an :func:`interleaved` run, sorted: how many times as fast ``fast`` was.

    Both runs of a round share the machine's state at that moment (clock, other processes), so a claim "fast is
    faster" holds across rounds when even the smallest ratio is above 1, busy machine or not (a sign test: with
    n rounds all above 1, p = 2^-n under "no difference").
    """
    return sorted(s / f for s, f in zip(times[slow], times[fast], strict=True))


def load_warning(threshold: float = 0.8) -> str | None:
    """A warning when other processes keep the CPU busy (1-minute load average ≥ ``threshold``), else None.

    PyTorch runs one OpenMP thread per core; when another process occupies a core, those threads wait for each
    other and a decoding step can become many times slower (README, "Troubleshooting"). Call it before the
    measurement starts, so that its own load is not counted.
    """
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return None
    if load < threshold:
        return None
    return (f"the machine is busy (1-minute load average {load:.1f} on {os.cpu_count()} cores, before this "
            f"measurement started): timings will be slow and noisy. Close other programs, or run with "
            f"OMP_NUM_THREADS=1 to keep PyTorch's threads from waiting on each other.")


# ------------------------------------------------------------------------------------- forward costs
class ForwardStep:
    """One KV-cached forward pass over ``n_tokens`` new tokens after the cached prompt, undone after each call.

    The prompt is prefilled into a :class:`transformers.DynamicCache` once; every call feeds ``n_tokens`` tokens
    (keeping the logits of all of them, as a verification pass does) and crops the cache back to the prompt, so
    calls can be repeated and ``cache`` stays usable afterwards.
    """

    def __init__(self, model: PreTrainedModel, input_ids: torch.Tensor, n_tokens: int) -> None:
        if n_tokens < 1:
            raise ValueError(f"n_tokens must be >= 1, got {n_tokens}")
        self.model = model
        self.n_tokens = n_tokens
        self.cache = DynamicCache(config=model.config)
        self.new_ids = input_ids[:, -1:].repeat(1, n_tokens)
        self._kwargs = ({"logits_to_keep": n_tokens}
                        if "logits_to_keep" in inspect.signature(model.forward).parameters else {})
        with torch.no_grad():
            model(input_ids, past_key_values=self.cache, use_cache=True, **self._kwargs)

    @torch.no_grad()
    def __call__(self) -> None:
        self.model(self.new_ids, past_key_values=self.cache, use_cache=True, **self._kwargs)
        self.cache.crop(-self.n_tokens)  # transformers 5: a negative number = how many tokens to drop


def step_time(model: PreTrainedModel, input_ids: torch.Tensor, n_tokens: int, repeats: int) -> float:
    """Median seconds of one KV-cached forward pass over ``n_tokens`` new tokens after ``input_ids``."""
    return median(interleaved({"step": ForwardStep(model, input_ids, n_tokens)}, repeats)["step"])


def cost_ratios(expert: PreTrainedModel, amateur: PreTrainedModel, input_ids: torch.Tensor,
                gammas: Sequence[int], repeats: int) -> tuple[float, dict[int, float]]:
    """``(c, {γ: r})``: c = amateur 1-token step / expert 1-token step, r(γ) = expert forward over γ+1 tokens /
    expert 1-token step. All passes are interleaved; each ratio is the median of its per-round ratios."""
    steps: dict[str, Callable[[], object]] = {"expert": ForwardStep(expert, input_ids, 1),
                                              "amateur": ForwardStep(amateur, input_ids, 1)}
    for gamma in gammas:
        steps[f"verify{gamma}"] = ForwardStep(expert, input_ids, gamma + 1)
    times = interleaved(steps, repeats)
    expert_times = times["expert"]

    def ratio(name: str) -> float:
        return median([t / e for t, e in zip(times[name], expert_times, strict=True)])

    return ratio("amateur"), {gamma: ratio(f"verify{gamma}") for gamma in gammas}


# ---------------------------------------------------------------------------------------- predictions
def expected_tokens(alpha: float, gamma: int) -> float:
    """Leviathan et al. Eq. 1: expected tokens per iteration, (1 - α^(γ+1)) / (1 - α); γ+1 when α = 1."""
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be in [0, 1], got {alpha!r}")
    if gamma < 0:
        raise ValueError(f"gamma must be >= 0, got {gamma!r}")
    if alpha == 1:
        return float(gamma + 1)
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)


def best_gamma(alpha: float, c: float, r_by_gamma: dict[int, float]) -> int:
    """The γ with the highest :func:`predicted_speedup` among the γ whose verification cost r(γ) was measured.

    r depends on γ (a CPU's forward pass over γ+1 tokens does not cost the same for every γ), so each candidate is
    scored with its own measured r, never with another γ's.
    """
    if not r_by_gamma:
        raise ValueError("r_by_gamma is empty: measure r for the γ to search, e.g. with cost_ratios")
    return max(r_by_gamma, key=lambda gamma: predicted_speedup(alpha, gamma, c, r_by_gamma[gamma]))


def predicted_speedup(alpha: float, gamma: int, c: float, r: float = 1.0) -> float:
    """Speedup over naive KV-cached decoding with the expert: expected_tokens / (γ·c + r).

    One iteration costs γ draft steps (c each, in expert steps) and one expert pass over γ+1 tokens (r); with
    r = 1 this is Leviathan et al. Thm 3.8. On a CPU r > 1 (see :func:`cost_ratios`).
    """
    cost = gamma * c + r
    if not cost > 0:  # also refuses NaN
        raise ValueError(f"gamma·c + r must be > 0, got {gamma}·{c} + {r}")
    return expected_tokens(alpha, gamma) / cost
