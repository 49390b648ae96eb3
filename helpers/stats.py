"""Does a sampler draw from the distribution it claims? (The exactness experiment of notebook 03.)

Pearson's chi-square goodness-of-fit test, plus the total variation distance between the empirical and the exact
distribution next to the TV that sampling noise alone produces for the same number of draws.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from helpers.decoding import probabilities


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
def exact_first_two(model: PreTrainedModel, prompt: torch.Tensor, **warp: float | int | None) -> torch.Tensor:
    """P(x1, x2) = p(x1 | prompt) · p(x2 | prompt, x1), computed exactly from the model (after the same
    temperature / top-k / top-p transform the sampler uses), flattened to x1 * vocab + x2."""
    p1 = probabilities(model(prompt).logits[0, -1], **warp).double()
    vocab = p1.shape[-1]
    joint = torch.zeros(vocab, vocab, dtype=torch.float64)
    for x1 in torch.nonzero(p1).flatten().tolist():
        longer = torch.cat([prompt, torch.tensor([[x1]], device=prompt.device)], dim=1)
        joint[x1] = p1[x1] * probabilities(model(longer).logits[0, -1], **warp).double().cpu()
    return joint.flatten()


def first_two_counts(sampler: Callable[[torch.Generator], list[int]], vocab: int, n_runs: int,
                     seed: int = 2024) -> torch.Tensor:
    """How often each pair (x1, x2) starts the output of ``sampler(generator)`` in ``n_runs`` seeded runs."""
    generator = torch.Generator().manual_seed(seed)
    counts = torch.zeros(vocab * vocab, dtype=torch.float64)
    for _ in range(n_runs):
        first, second = sampler(generator)[:2]
        counts[first * vocab + second] += 1
    return counts
