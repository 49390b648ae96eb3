"""Does a sampler draw from the distribution it claims? (The exactness experiment of notebook 03.)

Two ways to tell. **Statistically**: Pearson's chi-square goodness-of-fit test, plus the total variation distance
between the empirical and the exact distribution next to the TV that sampling noise alone produces for the same
number of draws (:func:`goodness_of_fit`). **Exactly**, without sampling noise: :func:`exact_distribution` runs a
decoder of :mod:`helpers.decoding` once for every path through its random draws and adds up the probabilities of
its outputs in float64; :func:`round_error` compares one speculative round, continued by the expert, with the
expert's own distribution (Leviathan et al. Appendix A.1).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

import torch
from transformers import PreTrainedModel

from helpers.decoding import core, probabilities

Outcome = TypeVar("Outcome", bound=Hashable)


@dataclass
class Fit:
    n: int
    chi2: float
    dof: int
    p_value: float
    """P(chi-square >= observed) if the sampler is exact; tiny values mean a detectable bias."""
    tv: float
    """Total variation ½ Σ |empirical - exact|."""
    tv_noise: float
    """The 99th percentile of the TV of n draws taken from the exact distribution itself."""
    impossible: int
    """Draws of outcomes the exact distribution gives probability 0."""


def chi2_sf(chi2: float, dof: int) -> float:
    """Survival function of the chi-square distribution: the regularised upper incomplete gamma Q(k/2, x/2)."""
    return float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                         torch.tensor(chi2 / 2, dtype=torch.float64)))


def total_variation(p: torch.Tensor, q: torch.Tensor) -> float:
    return 0.5 * float((p - q).abs().sum())


def goodness_of_fit(counts: torch.Tensor, probs: torch.Tensor, *, min_expected: float = 5.0,
                    noise_draws: int = 200, seed: int = 0) -> Fit:
    """Compare outcome ``counts`` with the exact ``probs`` (same shape, flattened outcomes).

    Outcomes expected fewer than ``min_expected`` times are pooled into one bin, as the chi-square
    approximation requires. Any draw of an impossible outcome makes the p-value 0.
    """
    counts, probs = counts.double().flatten(), probs.double().flatten()
    if counts.shape != probs.shape:
        raise ValueError(f"counts and probs must have the same number of outcomes, {counts.shape} != {probs.shape}")
    n = int(counts.sum())
    expected = n * probs
    impossible = int(counts[probs == 0].sum())
    big = expected >= min_expected
    small = ~big & (probs > 0)
    obs = torch.cat([counts[big], counts[small].sum().reshape(1)])
    exp = torch.cat([expected[big], expected[small].sum().reshape(1)])
    keep = exp > 0
    chi2 = float(((obs[keep] - exp[keep]) ** 2 / exp[keep]).sum())
    dof = int(keep.sum()) - 1
    p_value = 0.0 if impossible else chi2_sf(chi2, dof)
    generator = torch.Generator().manual_seed(seed)
    noise = [total_variation(torch.bincount(torch.multinomial(probs, n, replacement=True, generator=generator),
                                            minlength=len(probs)) / n, probs) for _ in range(noise_draws)]
    tv_noise = float(torch.tensor(noise).quantile(0.99))
    return Fit(n, chi2, dof, p_value, total_variation(counts / n, probs), tv_noise, impossible)


@torch.no_grad()
def exact_sequences(model: PreTrainedModel, prompt: torch.Tensor, length: int,
                    **warp: float | int | None) -> torch.Tensor:
    """P(x_1..x_n) = p(x_1 | prompt) · p(x_2 | prompt, x_1) ··· p(x_n | prompt, x_<n), computed exactly from the
    model (after the same temperature / top-k / top-p transform the sampler uses), in float64, shape (vocab,) * n;
    a 0-d tensor 1 for n = 0. One forward pass per prefix of positive probability."""
    if length == 0:
        return torch.ones((), dtype=torch.float64)
    p = probabilities(model(prompt).logits[0, -1], **warp).double().cpu()
    joint = torch.zeros((p.shape[-1],) * length, dtype=torch.float64)
    for x in torch.nonzero(p).flatten().tolist():
        longer = torch.cat([prompt, torch.tensor([[x]], device=prompt.device)], dim=1)
        joint[x] = p[x] * exact_sequences(model, longer, length - 1, **warp)
    return joint


def exact_first_two(model: PreTrainedModel, prompt: torch.Tensor, **warp: float | int | None) -> torch.Tensor:
    """P(x1, x2) of :func:`exact_sequences`, flattened to x1 * vocab + x2."""
    return exact_sequences(model, prompt, 2, **warp).flatten()


def first_two_counts(sampler: Callable[[torch.Generator], list[int]], vocab: int, n_runs: int,
                     seed: int = 2024) -> torch.Tensor:
    """How often each pair (x1, x2) starts the output of ``sampler(generator)`` in ``n_runs`` seeded runs."""
    generator = torch.Generator().manual_seed(seed)
    counts = torch.zeros(vocab * vocab, dtype=torch.float64)
    for _ in range(n_runs):
        first, second = sampler(generator)[:2]
        counts[first * vocab + second] += 1
    return counts


# ------------------------------------------------------------------------- exact, without sampling noise
class _Draws:
    """Stands in for :func:`helpers.decoding.sample` and :func:`helpers.decoding.bernoulli` during one run of
    :func:`exact_distribution`: the first draws follow ``script`` (the index of the outcome to take), later ones
    take their first outcome and note how many there were, so that the caller can try the others."""

    def __init__(self, script: tuple[int, ...], branching_draws: int | None) -> None:
        self.script = script
        self.categorical_left = branching_draws
        self.path: list[int] = []
        self.n_outcomes: list[int] = []
        self.probability = 1.0

    @property
    def branching(self) -> bool:
        return self.categorical_left is None or self.categorical_left > 0

    def _choose(self, probs: list[float]) -> int:
        index = self.script[len(self.path)] if len(self.path) < len(self.script) else 0
        self.path.append(index)
        self.n_outcomes.append(len(probs))
        self.probability *= probs[index]
        return index

    def sample(self, probs: torch.Tensor, generator: torch.Generator | None = None) -> int:
        weights = probs.detach().double().cpu()
        if not self.branching:
            return int(weights.argmax())
        tokens = torch.nonzero(weights).flatten()
        index = self._choose((weights[tokens] / weights.sum()).tolist())  # torch.multinomial normalises too
        if self.categorical_left is not None:
            self.categorical_left -= 1
        return int(tokens[index])

    def bernoulli(self, probability: float, generator: torch.Generator | None = None) -> bool:
        if not self.branching:
            return probability >= 0.5
        outcomes = [(value, p) for value, p in ((True, probability), (False, 1.0 - probability)) if p > 0]
        return outcomes[self._choose([p for _, p in outcomes])][0]

    def untried(self) -> list[tuple[int, ...]]:
        """The scripts of the runs that differ from this one first at a draw beyond its script."""
        return [(*self.path[:k], other) for k in range(len(self.script), len(self.path))
                for other in range(1, self.n_outcomes[k])]

    @contextmanager
    def installed(self) -> Iterator[None]:
        saved = core.sample, core.bernoulli  # every decoder draws through these two module attributes
        core.sample, core.bernoulli = self.sample, self.bernoulli
        try:
            yield
        finally:
            core.sample, core.bernoulli = saved


def exact_distribution(run: Callable[[], Outcome], *, branching_draws: int | None = None) -> dict[Outcome, float]:
    """The exact distribution of ``run()``'s result, for a ``run`` that decodes with :mod:`helpers.decoding`
    (notebook 03, the exactness experiment without sampling noise).

    Every random draw of those decoders is :func:`~helpers.decoding.sample` (a token from a probability vector) or
    :func:`~helpers.decoding.bernoulli` (a draft's acceptance). Both are replaced while ``run`` runs, once for every
    path through the draws' outcomes of positive probability (depth first, the decoder itself re-run each time),
    and each result gets the product of its path's probabilities, in float64: the real sampler is what is measured.

    ``branching_draws``: only the first that many ``sample`` draws (and the ``bernoulli`` draws before the last of
    them) branch; every later draw takes its most probable outcome, with weight 1, so ``run``'s result must not
    depend on them. The first round of :func:`~helpers.decoding.speculative` at T > 0 makes γ + 1 such draws (γ
    drafts, then the expert's token), a round of :func:`~helpers.decoding.prompt_lookup` 1. ``None``: all branch.
    """
    outcomes: dict[Outcome, float] = {}
    scripts: list[tuple[int, ...]] = [()]
    while scripts:
        draws = _Draws(scripts.pop(), branching_draws)
        with draws.installed():
            result = run()
        outcomes[result] = outcomes.get(result, 0.0) + draws.probability
        scripts.extend(draws.untried())
    return outcomes


@torch.no_grad()
def round_error(outputs: Mapping[tuple[int, ...], float], model: PreTrainedModel, prompt: torch.Tensor,
                length: int, **warp: float | int | None) -> float:
    """The exact one-round check of speculative sampling (notebook 03, the exactness experiment): the total
    variation between the model's distribution of ``length`` tokens (:func:`exact_sequences`) and that of a round's
    output y (``outputs``: y -> P(y), e.g. from :func:`exact_distribution`) continued by the model itself,

        Σ_y P(y) · p(z_{|y|+1..n} | prompt, y)  [y a prefix of z]   vs   p(z_1..z_n | prompt),   for all z.

    A round is exact iff the two agree (Leviathan et al. Appendix A.1: the accepted drafts, the resampled token
    and the bonus token each follow p given what precedes them), whatever γ, the drafter and the point where the
    round stops. 0 up to float rounding (< 1e-6) for an exact round; ``length`` must be >= the longest output.
    """
    target = exact_sequences(model, prompt, length, **warp)
    continued = torch.zeros_like(target)
    for y, p_y in outputs.items():
        if len(y) > length:
            raise ValueError(f"an output has {len(y)} tokens, more than length={length}: pass length >= γ + 1")
        longer = torch.cat([prompt, torch.tensor([list(y)], dtype=torch.long, device=prompt.device)], dim=1)
        continued[tuple(y)] += p_y * exact_sequences(model, longer, length - len(y), **warp)
    return total_variation(continued, target)
