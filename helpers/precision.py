"""What holds in exact arithmetic, and what is left of it in half precision (notebook 03, "Greedy speculative
decoding equals greedy decoding").

Greedy speculative decoding emits the expert's argmax at every position, so in exact arithmetic its output equals
greedy decoding token for token. A computer does not compute exactly: the verification pass feeds γ+1 tokens at
once, and a matrix-matrix product sums in another order than the 1-token step of greedy decoding. In fp32 the
difference (around 1e-6) has flipped no argmax on any prompt the tests and notebooks try (an observation, not a
guarantee). In bf16 or fp16 (what ``load_pair`` picks on a GPU)
one rounding step of a logit is about 0.1, and where the expert's two best tokens are that close, the two ways of
computing can pick different tokens; from there on the texts part ways. :func:`compare_greedy_texts` tells the two
cases apart: identical, or identical up to a near-tie that rounding explains.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel


def exact_arithmetic(model: PreTrainedModel) -> bool:
    """True for fp32/fp64 weights: the precisions in which greedy speculative output is expected (and checked) to equal
    greedy output token for token; guaranteed only in exact arithmetic, observed in fp32 on every prompt tested."""
    return next(model.parameters()).dtype in (torch.float32, torch.float64)


def ulp(value: float, dtype: torch.dtype) -> float:
    """One unit in the last place of ``value`` in ``dtype``: the size of one rounding step there."""
    return torch.finfo(dtype).eps * 2.0 ** math.floor(math.log2(max(abs(value), torch.finfo(dtype).tiny)))


@dataclass(frozen=True)
class Agreement:
    """How two greedy outputs for the same prompt compare (see :func:`compare_greedy_texts`)."""

    identical: bool
    first_difference: int | None
    """Index (among the new tokens) of the first token where they differ; None if one is a prefix of the other."""
    logit_gap: float | None
    """At that position: the expert's logit of the reference token minus that of the other token (1-token step)."""
    tolerance: float | None
    """The gap that counts as a near-tie: ``ulps`` rounding steps of the larger logit in the model's dtype."""

    @property
    def explained_by_rounding(self) -> bool:
        """Identical, or identical up to a position where the two candidates are tied within rounding."""
        if self.identical:
            return True
        return self.logit_gap is not None and abs(self.logit_gap) <= self.tolerance

    def describe(self) -> str:
        if self.identical:
            return "identical"
        return (f"identical up to token {self.first_difference}, where the expert's two candidates differ by "
                f"{abs(self.logit_gap):.3g} in logit (near-tie if ≤ {self.tolerance:.3g})")


@torch.no_grad()
def compare_greedy_texts(expert: PreTrainedModel, input_ids: torch.Tensor, reference: list[int], other: list[int],
                         ulps: int = 8) -> Agreement:
    """Compare ``other`` with the ``reference`` greedy output of ``expert`` after ``input_ids``.

    Where they first differ, re-run the expert's plain 1-token-step computation on the shared prefix and measure
    how far apart the two chosen tokens' logits are. A gap within ``ulps`` rounding steps of the model's dtype is
    a near-tie: a different summation order (a γ+1-token verification pass) may flip it.
    """
    if reference == other:
        return Agreement(identical=True, first_difference=None, logit_gap=None, tolerance=None)
    k = next((i for i, (a, b) in enumerate(zip(reference, other, strict=False)) if a != b), None)
    if k is None:  # one stopped earlier (a token budget or EOS); no differing token to judge
        return Agreement(identical=False, first_difference=None, logit_gap=None, tolerance=None)
    prefix = torch.cat([input_ids, torch.tensor([reference[:k]], dtype=input_ids.dtype, device=input_ids.device)],
                       dim=1)
    logits = expert(prefix).logits[0, -1].float()
    a, b = float(logits[reference[k]]), float(logits[other[k]])
    dtype = next(expert.parameters()).dtype
    return Agreement(identical=False, first_difference=k, logit_gap=a - b,
                     tolerance=ulps * ulp(max(abs(a), abs(b)), dtype))
