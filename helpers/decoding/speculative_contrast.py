"""Speculative contrastive decoding, Yuan et al. 2023 (arXiv 2311.08981) (notebook 08): one small model both drafts
and supplies the contrast; the expert verifies the drafts against the *contrastive* distribution in one pass.

The target is the logit form of contrastive decoding of O'Brien & Lewis 2023 (arXiv 2309.09117):

    s_cd(x) = (1 + β_CD) · log p_exp(x) − β_CD · log p_ama,τ(x)   for x in V_head = {x : p_exp(x) ≥ α_CD · max p_exp},
    s_cd(x) = −∞                                                 elsewhere,

and p_cd = softmax(s_cd / T), filtered by top-k / top-p like any other distribution (:func:`probabilities`).
O'Brien & Lewis write raw logits where this module writes log-probabilities; the two differ by a constant per
position, so they give the same p_cd and the same argmax. O'Brien & Lewis write β for the contrast strength; this
project writes β_CD (β is the acceptance probability Σ min(p, q), notebook 00's notation) and the code keeps
``beta=``. β_CD = 0 is the expert restricted to V_head. Li et al.'s greedy objective of notebook 02, argmax over
V_head of log p_exp − log p_ama, is the limit β_CD → ∞ (of s_cd / β_CD):
``beta=math.inf`` uses exactly that score, and greedy decoding over it picks :func:`~helpers.decoding.contrastive`'s
tokens.

* :func:`contrastive_sample` -- the plain reference: both models step once per token, the token is drawn from p_cd.
* :func:`speculative_contrastive` -- Leviathan et al.'s loop (:func:`~helpers.decoding.draft_and_verify`) with p_cd
  as the target: the amateur (or a draft head) drafts γ tokens from its own q; the expert scores them in one pass;
  each judged position's p_cd is built from the expert's logits and the amateur's logits at the same position.
  The output is distributed exactly as :func:`contrastive_sample`'s (greedy: the same tokens, in exact arithmetic).
* :class:`ContrastiveModel` -- p_cd as a model, for the tools that take one (the exact enumeration of
  :mod:`helpers.stats`).
"""

from __future__ import annotations

import math

import torch
from transformers import PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from helpers.decoding.contrast import contrastive_scores
from helpers.decoding.core import (
    CachedModel,
    EosIds,
    Generation,
    Stats,
    _check_pair_args,
    _eos_set,
    _is_number,
    _pick,
    check_inputs,
    probabilities,
)
from helpers.decoding.speculation import draft_and_verify


def check_beta(beta: float) -> None:
    if not (_is_number(beta) and beta >= 0):
        raise ValueError(f"beta (β_CD, the contrast strength) must be a number >= 0 (0: the expert; O'Brien & Lewis "
                         f"use 0.5; math.inf: Li et al.'s objective of notebook 02), got {beta!r}")


def contrastive_logits(expert_logits: torch.Tensor, amateur_logits: torch.Tensor, *, beta: float = 0.5,
                       alpha: float = 0.1, amateur_temperature: float = 1.0) -> torch.Tensor:
    """s_cd = (1 + β_CD) · log p_exp − β_CD · log p_ama,τ on V_head, −∞ elsewhere (O'Brien & Lewis 2023);
    ``beta=math.inf``: log p_exp − log p_ama,τ on V_head (Li et al. Eq. (3)-(4), notebook 02). Any leading shape;
    the last dimension is the vocabulary. ``probabilities(s_cd, T, top_k, top_p)`` is p_cd."""
    cd = contrastive_scores(expert_logits, amateur_logits, alpha, amateur_temperature)
    if math.isinf(beta):
        return cd.scores
    return ((1 + beta) * cd.log_p_exp - beta * cd.log_p_ama).masked_fill(~cd.in_head, -math.inf)


class ContrastiveModel(torch.nn.Module):
    """p_cd as a causal LM without a cache: its logits at every position are s_cd from both models' logits there,
    so that every tool taking one model takes the contrastive target, e.g. ``exact_sequences(ContrastiveModel(...),
    prompt, n, temperature=T)`` is the exact distribution of n tokens of :func:`contrastive_sample`."""

    def __init__(self, expert: PreTrainedModel, amateur: PreTrainedModel, *, beta: float = 0.5, alpha: float = 0.1,
                 amateur_temperature: float = 1.0) -> None:
        super().__init__()
        check_beta(beta)
        _check_pair_args(alpha=alpha, amateur_temperature=amateur_temperature)
        self.expert, self.amateur = expert, amateur
        self.knobs = {"beta": beta, "alpha": alpha, "amateur_temperature": amateur_temperature}

    @torch.no_grad()
    def forward(self, input_ids: torch.Tensor) -> CausalLMOutputWithPast:
        return CausalLMOutputWithPast(logits=contrastive_logits(self.expert(input_ids).logits,
                                                                self.amateur(input_ids).logits, **self.knobs))


def _check(expert: PreTrainedModel, amateur: PreTrainedModel, input_ids: torch.Tensor, max_new_tokens: int, *,
           beta: float, alpha: float, amateur_temperature: float, temperature: float, top_k: int | None,
           top_p: float | None, generator: torch.Generator | None, rollback: bool) -> None:
    check_inputs([expert, amateur], input_ids, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                 generator=generator, rollback=rollback)
    check_beta(beta)
    _check_pair_args(alpha=alpha, amateur_temperature=amateur_temperature)


def contrastive_sample(expert: PreTrainedModel, amateur: PreTrainedModel, input_ids: torch.Tensor, *,
                       max_new_tokens: int, beta: float = 0.5, alpha: float = 0.1, amateur_temperature: float = 1.0,
                       temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
                       generator: torch.Generator | None = None, eos_token_id: EosIds = None) -> Generation:
    """Contrastive decoding with the target p_cd, one token at a time (the reference :func:`speculative_contrastive`
    must match): each step, both models read the last token (KV-cached), and the next token is drawn from
    p_cd = probabilities(s_cd, T, top_k, top_p) (``temperature=0``: its argmax). Costs one expert and one amateur
    step per token, like notebook 02's :func:`~helpers.decoding.contrastive`, which it equals at T = 0 and
    β_CD = ∞."""
    _check(expert, amateur, input_ids, max_new_tokens, beta=beta, alpha=alpha,
           amateur_temperature=amateur_temperature, temperature=temperature, top_k=top_k, top_p=top_p,
           generator=generator, rollback=False)
    eos = _eos_set(eos_token_id)
    exp, ama = CachedModel(expert, input_ids), CachedModel(amateur, input_ids)
    new: list[int] = []
    while len(new) < max_new_tokens:
        s_cd = contrastive_logits(exp.logits()[-1], ama.logits()[-1], beta=beta, alpha=alpha,
                                  amateur_temperature=amateur_temperature)
        token = _pick(probabilities(s_cd, temperature, top_k, top_p), temperature, generator)
        new.append(token)
        exp.append([token])
        ama.append([token])
        if token in eos:
            break
    return Generation(new, Stats(expert_calls=exp.calls, amateur_calls=ama.calls))


def speculative_contrastive(expert: PreTrainedModel, amateur: PreTrainedModel, input_ids: torch.Tensor, *,
                            max_new_tokens: int, gamma: int = 4, beta: float = 0.5, alpha: float = 0.1,
                            amateur_temperature: float = 1.0, temperature: float = 1.0, top_k: int | None = None,
                            top_p: float | None = None, generator: torch.Generator | None = None,
                            eos_token_id: EosIds = None, head: torch.nn.Module | None = None) -> Generation:
    """Speculative contrastive decoding (Yuan et al. 2023; notebook 08): Leviathan et al.'s round with p_cd as the
    target, so the output is distributed exactly as :func:`contrastive_sample`'s.

    Each round: the drafter proposes n ≤ γ tokens x_i ~ q_i; the expert scores prefix + drafts in one pass; at each
    of the n + 1 judged positions p_cd,i is built from the expert's logits and the amateur's logits at the same
    position; draft i is accepted with probability min(1, p_cd,i(x_i) / q_i(x_i)); at the first rejection a token
    is drawn from norm(max(0, p_cd,i − q_i)); after a full acceptance the bonus token from p_cd,n+1. Both caches
    roll back as in notebook 03.

    The drafter is the amateur itself (``head=None``): q is its own distribution under the same T / top-k / top-p,
    and its contrast logits are the ones it computed while drafting, plus one more amateur step after the last
    draft (for the bonus position; the next round then has one token less to read). With ``head`` (a
    :class:`~helpers.heads.DraftHead` attached to the expert, notebook 07) the head drafts and the amateur only
    supplies the contrast, in one pass over the n + 1 judged positions. ``stats.amateur_calls`` counts amateur
    forward passes (``stats.head_calls`` the head's); ``stats.betas`` holds Σ min(p_cd, q) per draft position, so
    ``stats.mean_beta`` is α under p_cd.
    """
    _check(expert, amateur, input_ids, max_new_tokens, beta=beta, alpha=alpha,
           amateur_temperature=amateur_temperature, temperature=temperature, top_k=top_k, top_p=top_p,
           generator=generator, rollback=True)
    _check_pair_args(gamma=gamma)
    knobs = {"beta": beta, "alpha": alpha, "amateur_temperature": amateur_temperature}
    exp = CachedModel(expert, input_ids, keep_features=head is not None,
                      feature_layers=(-1,) if head is None else head.feature_layers)
    ama = CachedModel(amateur, input_ids)
    contrast: list[torch.Tensor] = []  # the amateur's logits at this round's n + 1 judged positions

    def amateur_drafts(n_draft: int) -> tuple[list[int], list[torch.Tensor]]:
        ama.follow(exp.tokens)  # the accepted drafts + the expert's token; a rejected draft is rolled back
        draft: list[int] = []
        qs: list[torch.Tensor] = []
        contrast.clear()
        for _ in range(n_draft):
            contrast.append(ama.logits()[-1])
            q = probabilities(contrast[-1], temperature, top_k, top_p)
            draft.append(_pick(q, temperature, generator))
            qs.append(q)
            ama.append(draft[-1:])
        contrast.append(ama.logits()[-1])  # the position after the last draft: the bonus token's
        return draft, qs

    if head is None:
        propose = amateur_drafts
    else:
        from helpers.heads import HeadDrafter, check_attached  # helpers.heads imports helpers.decoding

        check_attached(head, expert)
        head_drafter = HeadDrafter(head, exp, temperature=temperature, top_k=top_k, top_p=top_p,
                                   generator=generator)

        def propose(n_draft: int) -> tuple[list[int], list[torch.Tensor]]:
            draft, qs = head_drafter(n_draft)
            ama.follow(exp.tokens)
            ama.append(draft)
            contrast[:] = ama.logits(keep=len(draft) + 1)  # one amateur pass over the n + 1 judged positions
            return draft, qs

    def target(expert_logits: torch.Tensor) -> torch.Tensor:
        return probabilities(contrastive_logits(expert_logits, torch.stack(contrast), **knobs), temperature, top_k,
                             top_p)

    result = draft_and_verify(exp, propose, max_new_tokens=max_new_tokens, gamma=gamma, temperature=temperature,
                              top_k=top_k, top_p=top_p, generator=generator, eos=_eos_set(eos_token_id),
                              target=target)
    result.stats.amateur_calls = ama.calls
    if head is not None:
        result.stats.head_calls = head_drafter.calls
    return result
