"""Contrastive decoding, Li et al. 2022 (notebook 02): among the tokens the expert finds plausible,
V_head = {x : p_exp(x) >= α_CD · max_w p_exp(w)}, pick argmax log p_exp(x) - log p_ama(x)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
from transformers import PreTrainedModel

from helpers.decoding.core import CachedModel, EosIds, Generation, Stats, _check_pair_args, _eos_set, check_inputs


@dataclass
class Candidate:
    """One candidate token of a contrastive decoding step (notebook 02's decision picture)."""

    token_id: int
    p_exp: float
    p_ama: float
    score: float
    """log p_exp - log p_ama (the amateur at its temperature τ)."""
    in_head: bool
    """True if p_exp >= α · max p_exp (the plausibility mask)."""


@dataclass
class ContrastiveStep:
    candidates: list[Candidate]
    """The expert's top candidates, most probable first."""
    chosen: int


class ContrastiveScores(NamedTuple):
    scores: torch.Tensor
    """log p_exp - log p_ama inside V_head, -inf outside: ``scores.argmax()`` is the CD choice."""
    in_head: torch.Tensor
    """The plausibility mask V_head."""
    log_p_exp: torch.Tensor
    log_p_ama: torch.Tensor
    """The amateur's log-probabilities at temperature τ."""


def contrastive_scores(expert_logits: torch.Tensor, amateur_logits: torch.Tensor, alpha: float = 0.1,
                       amateur_temperature: float = 1.0) -> ContrastiveScores:
    """Li et al. Eq. (3)-(4): the CD score log p_exp - log p_ama(τ), restricted to the plausibility mask
    V_head = {x : p_exp(x) >= α · max p_exp}."""
    log_p_exp = torch.log_softmax(expert_logits.float(), dim=-1)
    log_p_ama = torch.log_softmax(amateur_logits.float() / amateur_temperature, dim=-1)
    in_head = log_p_exp >= math.log(alpha) + log_p_exp.max(dim=-1, keepdim=True).values
    scores = (log_p_exp - log_p_ama).masked_fill(~in_head, -math.inf)
    return ContrastiveScores(scores, in_head, log_p_exp, log_p_ama)


def contrastive(expert: PreTrainedModel, amateur: PreTrainedModel, input_ids: torch.Tensor, *,
                max_new_tokens: int, alpha: float = 0.1, amateur_temperature: float = 1.0,
                eos_token_id: EosIds = None, trace_top: int = 8) -> Generation:
    """Contrastive decoding (Li et al. 2022), greedy search over the CD objective, both models KV-cached.

    ``trace_top`` expert candidates per step are recorded in ``trace`` (p_exp, p_ama, score, mask).
    """
    check_inputs([expert, amateur], input_ids, max_new_tokens)
    _check_pair_args(alpha=alpha, amateur_temperature=amateur_temperature)
    eos = _eos_set(eos_token_id)
    exp, ama = CachedModel(expert, input_ids), CachedModel(amateur, input_ids)
    new: list[int] = []
    trace: list[ContrastiveStep] = []
    while len(new) < max_new_tokens:
        cd = contrastive_scores(exp.logits()[-1], ama.logits()[-1], alpha, amateur_temperature)
        token = int(cd.scores.argmax())
        top = torch.topk(cd.log_p_exp, min(trace_top, cd.log_p_exp.shape[-1])).indices.tolist()
        trace.append(ContrastiveStep(
            [Candidate(t, math.exp(cd.log_p_exp[t]), math.exp(cd.log_p_ama[t]),
                       float(cd.log_p_exp[t] - cd.log_p_ama[t]), bool(cd.in_head[t])) for t in top], token))
        new.append(token)
        exp.append([token])
        ama.append([token])
        if token in eos:
            break
    return Generation(new, Stats(expert_calls=exp.calls, amateur_calls=ama.calls), trace)
