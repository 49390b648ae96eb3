"""Naive decoding (notebook 01): one model, one token per forward pass; greedy, temperature, top-k, top-p, with or
without a KV cache, and CTRL's repetition penalty (also used by :func:`helpers.decoding.one_model.dola`)."""

from __future__ import annotations

import time

import torch
from transformers import PreTrainedModel

from helpers.decoding.core import (
    CachedModel,
    EosIds,
    Generation,
    Stats,
    _eos_set,
    _is_number,
    _pick,
    check_inputs,
    probabilities,
)


def naive(model: PreTrainedModel, input_ids: torch.Tensor, *, max_new_tokens: int, temperature: float = 1.0,
          top_k: int | None = None, top_p: float | None = None, use_cache: bool = True,
          generator: torch.Generator | None = None, eos_token_id: EosIds = None,
          repetition_penalty: float = 1.0) -> Generation:
    """Autoregressive decoding with one model (notebook 01): one forward pass per new token.

    ``use_cache=False`` re-reads the whole prefix at every step (quadratic work), like the source article.
    ``repetition_penalty`` > 1 applies CTRL's penalty (:func:`penalize_repetition`) to the logits of every token
    of the prompt and output so far, before temperature, top-k and top-p (transformers' order); 1.0 = off.
    Notebook 06 uses greedy + 1.2 to separate what DoLa's contrast does from what its penalty does.
    """
    check_inputs([model], input_ids, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                 generator=generator)
    _check_penalty(repetition_penalty)
    eos = _eos_set(eos_token_id)
    lm = CachedModel(model, input_ids, use_cache)
    new: list[int] = []
    seconds: list[float] = []
    while len(new) < max_new_tokens:
        start = time.perf_counter()
        logits = lm.logits()[-1]
        if repetition_penalty != 1.0:
            logits = penalize_repetition(logits, lm.tokens[0], repetition_penalty)
        token = _pick(probabilities(logits, temperature, top_k, top_p), temperature, generator)
        new.append(token)
        lm.append([token])
        seconds.append(time.perf_counter() - start)
        if token in eos:
            break
    return Generation(new, Stats(expert_calls=lm.calls, round_seconds=seconds))


def _check_penalty(repetition_penalty: float) -> None:
    if not (_is_number(repetition_penalty) and repetition_penalty > 0):
        raise ValueError(f"repetition_penalty must be > 0 (1.0 = off; DoLa's paper uses 1.2), "
                         f"got {repetition_penalty!r}")


def penalize_repetition(scores: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """CTRL's repetition penalty (Keskar et al. 2019, as transformers' ``repetition_penalty``): the score of every
    token in ``seen`` is divided by ``penalty`` if positive, multiplied by it if negative."""
    seen = torch.unique(seen)
    old = scores[seen]
    return scores.index_put((seen,), torch.where(old < 0, old * penalty, old / penalty))
