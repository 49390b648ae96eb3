"""Prompt-lookup decoding, Saxena 2023 (notebook 06): a draft that costs no model, copied from the context and
verified exactly as in :func:`helpers.decoding.speculation.draft_and_verify`."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedModel

from helpers.decoding.core import (
    CachedModel,
    EosIds,
    Generation,
    _check_pair_args,
    _eos_set,
    _is_int,
    _vocab_size,
    check_inputs,
)
from helpers.decoding.speculation import draft_and_verify


def lookup_draft(context: Sequence[int], n_tokens: int, max_ngram: int = 3) -> list[int]:
    """The prompt-lookup draft: for n = max_ngram down to 1, find the most recent earlier occurrence of the
    context's last n tokens and return (at most ``n_tokens`` of) the tokens that followed it; [] if none matches.

    A variant of transformers' ``PromptLookupCandidateGenerator`` (notebook 06), which takes the *leftmost* match of
    the n-gram instead: on a context where the n-gram occurs more than once the two copy different drafts. Which
    match is copied changes only the speed, never the output distribution (the drafts are verified exactly).
    """
    context = list(context)
    for n in range(min(max_ngram, len(context) - 1), 0, -1):
        ngram = context[-n:]
        for start in range(len(context) - n - 1, -1, -1):
            if context[start:start + n] == ngram:
                return context[start + n:start + n + n_tokens]
    return []


def prompt_lookup(model: PreTrainedModel, input_ids: torch.Tensor, *, max_new_tokens: int, gamma: int = 10,
                  max_ngram: int = 3, temperature: float = 1.0, top_k: int | None = None,
                  top_p: float | None = None, generator: torch.Generator | None = None,
                  eos_token_id: EosIds = None) -> Generation:
    """Prompt-lookup decoding, Saxena 2023 (transformers' ``generate(prompt_lookup_num_tokens=γ)``; notebook 06).

    The draft costs no model at all: up to γ tokens copied from the context (prompt + output so far) after the
    most recent earlier occurrence of its last n-gram (:func:`lookup_draft`, n = ``max_ngram`` down to 1). Its
    draft distribution q_i is a point mass on the copied token, which Leviathan et al.'s modified rejection
    sampling accepts like any other q -- with probability min(1, p_i(x_i) / 1) = p_i(x_i) = β -- so the
    verification is :func:`speculative`'s, and the output is distributed exactly as sampling from the model.
    Without a match the round is a plain one-token step (an expert call with no draft). Wins where the output
    repeats its input: summaries, edits, quotes, code.
    """
    check_inputs([model], input_ids, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                 generator=generator, rollback=True)
    _check_pair_args(gamma=gamma)
    if not _is_int(max_ngram, 1):
        raise ValueError(f"max_ngram (the longest n-gram to look up) must be an int >= 1, got {max_ngram!r}; "
                         "transformers uses 2, 3 is a good default")
    exp = CachedModel(model, input_ids)
    vocab = _vocab_size(model)

    def propose(n_draft: int) -> tuple[list[int], torch.Tensor]:
        draft = lookup_draft(exp.tokens[0].tolist(), n_draft, max_ngram)
        point_masses = torch.nn.functional.one_hot(torch.tensor(draft, dtype=torch.long), vocab)
        return draft, point_masses.to(device=exp.tokens.device, dtype=torch.float32)

    return draft_and_verify(exp, propose, max_new_tokens=max_new_tokens, gamma=gamma, temperature=temperature,
                            top_k=top_k, top_p=top_p, generator=generator, eos=_eos_set(eos_token_id))
