"""Wall-clock measurement for notebook 04 and ``python -m helpers.bench``.

* :func:`interleaved` -- time several functions round-robin, so that slow drifts of the machine (turbo clocks,
  another process) hit every method alike; :func:`paired_ratios` compares two of them round by round, and
  :func:`load_warning` says when the machine is too busy to time anything.
* :func:`step_time` / :func:`cost_ratios` / :func:`drafter_costs` / :func:`forward_costs` -- the cost of one
  KV-cached forward pass, and the two ratios that predict speculative decoding's speed on a CPU: c = draft step /
  expert step and r(γ) = expert forward over γ+1 tokens / expert step.
* :func:`expected_tokens` / :func:`predicted_speedup` / :func:`best_gamma` -- Leviathan et al. 2023, Eq. 1 and
  Thm 3.8, with the verification cost r(γ) instead of the paper's "verifying is free" (r = 1);
  :func:`speedup_from_counts` -- the same cost model fed with a run's counted draft lengths.
"""

from __future__ import annotations

import inspect
import os
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import DynamicCache, PreTrainedModel


# ------------------------------------------------------------------------------------------- timing
def interleaved(fns: dict[str, Callable[[], object]], repeats: int, warmup: int = 1, *,
                on_run: Callable[[str], None] | None = None, seed: int | None = 0) -> dict[str, list[float]]:
    """Run every function once per round, round after round, and return the seconds of each timed run by name.

    Every round runs the functions in an order shuffled anew (``random.Random(seed)``, as in
    :func:`helpers.protocol.timed_runs`), so that a drift of the machine does not always hit the same function
    first; ``seed=None`` keeps the dict's order in every round. The first ``warmup`` rounds are run but not
    recorded. ``on_run(name)`` is called after every run, outside the timed region (a progress bar, say).
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got repeats={repeats}, warmup={warmup}")
    rng = None if seed is None else random.Random(seed)
    times: dict[str, list[float]] = {name: [] for name in fns}
    for round_ in range(warmup + repeats):
        order = list(fns)
        if rng is not None:
            rng.shuffle(order)
        for name in order:
            fn = fns[name]
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


def _cpu_seconds() -> tuple[float, float] | None:
    """(busy, total) CPU seconds of the whole machine since boot, from /proc/stat (Linux); None elsewhere."""
    try:
        fields = [float(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
    return (sum(fields) - idle) / ticks, sum(fields) / ticks


def others_busy_cores(window: float = 0.5) -> float | None:
    """How many cores other processes keep busy, measured over ``window`` seconds while this process sleeps
    (Linux; None elsewhere). A load average would also count this process's own recent work."""
    before, own_before = _cpu_seconds(), time.process_time()
    if before is None:
        return None
    time.sleep(window)
    after, own_after = _cpu_seconds(), time.process_time()
    if after is None:
        return None
    return max(0.0, (after[0] - before[0]) - (own_after - own_before)) / window


def load_warning(threshold: float = 0.5, window: float = 0.5) -> str | None:
    """A warning when other processes keep at least ``threshold`` of a core busy, else None.

    PyTorch runs one OpenMP thread per core; when another process occupies a core, those threads wait for each
    other and a decoding step can become many times slower (README, "Troubleshooting"). Call it before the
    measurement starts.
    """
    busy = others_busy_cores(window)
    if busy is None or busy < threshold:
        return None
    return (f"the machine is busy: other processes kept {busy:.1f} of {os.cpu_count()} cores busy just before this "
            f"measurement; timings will be slow and noisy. Close other programs, or run with OMP_NUM_THREADS=1 to "
            f"keep PyTorch's threads from waiting on each other.")


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


def _median_ratios(times: dict[str, list[float]], baseline: str) -> dict[str, float]:
    """Each timed name's median per-round ratio to ``baseline`` (ratios within a round share the machine state)."""
    return {name: median([t / b for t, b in zip(ts, times[baseline], strict=True)]) for name, ts in times.items()}


def cost_ratios(expert: PreTrainedModel, amateur: PreTrainedModel, input_ids: torch.Tensor,
                gammas: Sequence[int], repeats: int) -> tuple[float, dict[int, float]]:
    """``(c, {γ: r})``: c = amateur 1-token step / expert 1-token step, r(γ) = expert forward over γ+1 tokens /
    expert 1-token step. All passes are interleaved; each ratio is the median of its per-round ratios."""
    c, r = drafter_costs(expert, input_ids, {"amateur": ForwardStep(amateur, input_ids, 1)}, gammas, repeats)
    return c["amateur"], {gamma: r[gamma] for gamma in gammas}


def drafter_costs(expert: PreTrainedModel, input_ids: torch.Tensor, drafters: dict[str, Callable[[], object]],
                  draft_lengths: Sequence[int], repeats: int) -> tuple[dict[str, float], dict[int, float]]:
    """``({drafter: c}, {d: r(d)})`` for several drafters at once (notebook 07, ``python -m helpers.bench``).

    ``drafters`` maps a name to one draft step on the prompt (e.g. a :class:`ForwardStep` of a small model, or a
    draft head's step); c = its time / the expert's 1-token step. r(d) = expert forward over d+1 tokens / expert
    step, for every d in ``draft_lengths`` (r(0) = 1: a round that drafted nothing is one ordinary step). All
    passes are interleaved; each ratio is the median of its per-round ratios."""
    if "expert" in drafters:
        raise ValueError("'expert' names the baseline step: call the drafter something else")
    steps: dict[str, Callable[[], object]] = {"expert": ForwardStep(expert, input_ids, 1), **drafters}
    lengths = sorted({d for d in draft_lengths if d > 0})
    steps.update({f"verify{d}": ForwardStep(expert, input_ids, d + 1) for d in lengths})
    ratios = _median_ratios(interleaved(steps, repeats), "expert")
    return ({name: ratios[name] for name in drafters},
            {0: 1.0, **{d: ratios[f"verify{d}"] for d in lengths}})


def forward_costs(model: PreTrainedModel, input_ids: torch.Tensor, token_counts: Sequence[int],
                  repeats: int) -> dict[int, float]:
    """Notebook 04: {n: time of one KV-cached forward pass over n new tokens / time of a 1-token step}.

    A verification pass of speculative decoding with draft length γ is the case n = γ + 1, so r(γ) = cost[γ + 1].
    On an accelerator the cost stays near 1 for small n (the pass is memory-bound: reading the weights dominates);
    on a CPU it can jump as soon as n > 1, where matrix-vector kernels give way to matrix-matrix ones.
    """
    if not token_counts or any(n < 1 for n in token_counts):
        raise ValueError(f"token_counts must be >= 1, got {list(token_counts)!r}")
    steps: dict[str, Callable[[], object]] = {"step": ForwardStep(model, input_ids, 1)}
    steps.update({f"n{n}": ForwardStep(model, input_ids, n) for n in token_counts if n != 1})
    ratios = _median_ratios(interleaved(steps, repeats), "step")
    return {n: 1.0 if n == 1 else ratios[f"n{n}"] for n in token_counts}


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


def speedup_from_counts(draft_lengths: Sequence[int], n_tokens: int, c: float, r: dict[int, float]) -> float:
    """The speedup that the measured counts of one run explain: n_tokens / Σ_rounds (d·c + r(d)), with d the
    tokens drafted in each round (one expert pass each). Unlike :func:`predicted_speedup` it needs no α and no
    constant γ, so it also explains dynamic draft lengths, prompt lookup and the head's draft-less first round;
    prefill is left out on both sides. r must hold every d that occurred (:func:`drafter_costs`)."""
    missing = sorted({d for d in draft_lengths} - set(r))
    if missing:
        raise ValueError(f"r is missing the draft lengths {missing}: measure them with drafter_costs")
    cost = sum(d * c + r[d] for d in draft_lengths)
    if not cost > 0:
        raise ValueError("no rounds to explain")
    return n_tokens / cost


def predicted_speedup(alpha: float, gamma: int, c: float, r: float = 1.0) -> float:
    """Speedup over naive KV-cached decoding with the expert: expected_tokens / (γ·c + r).

    One iteration costs γ draft steps (c each, in expert steps) and one expert pass over γ+1 tokens (r); with
    r = 1 this is Leviathan et al. Thm 3.8. On a CPU r > 1 (see :func:`cost_ratios`).
    """
    cost = gamma * c + r
    if not cost > 0:  # also refuses NaN
        raise ValueError(f"gamma·c + r must be > 0, got {gamma}·{c} + {r}")
    return expected_tokens(alpha, gamma) / cost
