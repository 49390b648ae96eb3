"""Speculative decoding / sampling, Leviathan et al. 2023 Algorithm 1 and Chen et al. 2023 (notebook 03): a drafter
proposes γ tokens, the expert verifies them in one forward pass, modified rejection sampling keeps exactly the
expert's distribution. :func:`draft_and_verify` is the loop for any drafter (a :data:`Proposer`);
:func:`speculative` is the loop with a small amateur model as the drafter."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from helpers.decoding import core
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


@dataclass
class SpecIteration:
    """One draft -> verify -> accept/reject round of :func:`speculative` (the notebook 03 pictures)."""

    draft: list[int]
    p_draft: list[float]
    """p_i(x_i): the expert's probability of each draft token."""
    q_draft: list[float]
    """q_i(x_i): the amateur's probability of each draft token."""
    n_accepted: int
    last_token: int | None
    """The token the expert adds: resampled from norm(max(0, p - q)) after a rejection, or the bonus token
    sampled from p_{γ+1} when every draft token was accepted. None when EOS or the budget ended the round."""
    last_kind: str
    """"resampled", "bonus" or "none"."""

    @property
    def emitted(self) -> list[int]:
        """The tokens this round adds to the output: the accepted drafts, then the expert's token."""
        return self.draft[:self.n_accepted] + ([self.last_token] if self.last_token is not None else [])


Proposer = Callable[[int], tuple[list[int], Sequence[torch.Tensor] | torch.Tensor]]
"""``propose(n)`` -> (at most n draft tokens x_i, their draft distributions q_i): one round's draft."""


def draft_and_verify(exp: CachedModel, propose: Proposer, *, max_new_tokens: int, gamma: int, temperature: float,
                      top_k: int | None, top_p: float | None, generator: torch.Generator | None,
                      eos: frozenset[int], target: Callable[[torch.Tensor], torch.Tensor] | None = None
                      ) -> Generation:
    """Leviathan et al. Algorithm 1 with any drafter: the loop of :func:`speculative` and :func:`prompt_lookup`.

    Each round: ``propose`` drafts up to γ tokens x_i with distributions q_i; the expert scores prefix + drafts in
    **one** forward pass, giving p_1..p_{n+1}; draft i is accepted with probability min(1, p_i(x_i) / q_i(x_i));
    at the first rejection a token is drawn from norm(max(0, p_i - q_i)) and the round ends; if all drafts are
    accepted a bonus token is drawn from p_{n+1}. Whatever q is, the output is distributed exactly as sampling
    from p (Appendix A.1). The expert's cache is cropped back to the accepted prefix after a rejection.

    ``target`` maps the expert's logits at the n + 1 judged positions to the distributions p the round judges and
    draws by (notebook 08: the contrastive p_cd); None: the expert's own, ``probabilities(logits, T, top_k, top_p)``.
    """
    new: list[int] = []
    stats = Stats()
    trace: list[SpecIteration] = []
    while len(new) < max_new_tokens:
        start = time.perf_counter()
        # 1. Draft: at most γ tokens (fewer near the end, so the budget is never exceeded).
        draft, qs = propose(min(gamma, max_new_tokens - len(new) - 1))
        n_draft = len(draft)
        # 2. Verify: one expert forward pass over the unseen prefix + all drafts -> p_1 .. p_{n_draft+1}.
        exp.append(draft)
        logits = exp.logits(keep=n_draft + 1)
        ps = probabilities(logits, temperature, top_k, top_p) if target is None else target(logits)
        # 3. Accept or reject the drafts in order.
        n_accepted, last_token, last_kind = 0, None, "none"
        for i, x in enumerate(draft):
            p_x, q_x = float(ps[i, x]), float(qs[i][x])
            stats.betas.append(float(torch.minimum(ps[i], qs[i]).sum()))
            accepted = p_x >= q_x or (temperature > 0 and core.bernoulli(p_x / q_x, generator))
            if not accepted:
                residual = torch.clamp(ps[i] - qs[i], min=0)
                mass = residual.sum()
                last_token = _pick(residual / mass if mass > 0 else ps[i], temperature, generator)
                last_kind = "resampled"
                break
            n_accepted += 1
            if x in eos:
                break
        stop = any(x in eos for x in draft[:n_accepted])
        if last_token is None and not stop:
            last_token, last_kind = _pick(ps[n_draft], temperature, generator), "bonus"
        # 4. Keep the accepted prefix (+ the expert's token); roll the expert's cache back to it.
        it = SpecIteration(draft, [float(ps[i, x]) for i, x in enumerate(draft)],
                           [float(q[x]) for q, x in zip(qs, draft, strict=True)], n_accepted, last_token, last_kind)
        exp.rollback(n_draft - n_accepted)
        exp.append([last_token] if last_token is not None else [])
        new.extend(it.emitted)
        stats.proposed += n_draft
        stats.accepted += n_accepted
        stats.accepted_per_iteration.append(n_accepted)
        trace.append(it)
        stats.round_seconds.append(time.perf_counter() - start)
        if stop or last_token in eos:
            break
    stats.expert_calls = exp.calls
    return Generation(new, stats, trace)


def check_confidence_threshold(threshold: float | None) -> None:
    if threshold is not None and not (_is_number(threshold) and 0 <= threshold <= 1):
        raise ValueError(f"confidence_threshold must be in [0, 1] or None (always draft γ tokens), got {threshold!r}; "
                         "transformers' assistant_confidence_threshold starts at 0.4")


def confident(logits: torch.Tensor, token: int, threshold: float | None) -> bool:
    """Dynamic draft length: may the drafter go on after drafting ``token``? Yes while the drafter's own
    probability of it, softmax(logits)[token] at temperature 1 before any top-k/top-p, reaches ``threshold``; no
    threshold means always (a constant γ). The rule of transformers' ``assistant_confidence_threshold``
    (``ConfidenceCriteria``: the drafted token's probability; its schedule then adapts the threshold, ours stays
    fixed); at temperature 0 it is the drafter's top probability. SpecDec++ and EAGLE-2 learn or adapt this
    stopping rule. Exactness does not depend on it: the stop is decided by the drafter alone."""
    return threshold is None or float(torch.softmax(logits.float(), dim=-1)[token]) >= threshold


def speculative(expert: PreTrainedModel, amateur: PreTrainedModel, input_ids: torch.Tensor, *,
                max_new_tokens: int, gamma: int = 4, temperature: float = 1.0, top_k: int | None = None,
                top_p: float | None = None, generator: torch.Generator | None = None,
                eos_token_id: EosIds = None, confidence_threshold: float | None = None) -> Generation:
    """Speculative sampling, Leviathan et al. 2023 Algorithm 1 (notebook 03).

    Each iteration: the amateur samples γ draft tokens x_i ~ q_i; the expert scores prefix + drafts in **one**
    forward pass, giving p_1..p_{γ+1}; draft i is accepted with probability min(1, p_i(x_i) / q_i(x_i)); at the
    first rejection a token is drawn from norm(max(0, p_i - q_i)) and the round ends; if all γ are accepted a
    bonus token is drawn from p_{γ+1}. p and q are transformed alike (temperature, top-k, top-p), so the output
    is distributed exactly as :func:`naive` sampling from the expert with the same settings. Both KV caches are
    cropped back to the accepted prefix after a rejection, so models whose cache cannot be cropped (sliding-window
    or linear-attention layers) are refused up front (:func:`_check_rollback`).

    ``confidence_threshold`` makes the draft length dynamic (:func:`confident`): the amateur stops drafting after
    a token it gave a probability below the threshold, so a round drafts between 1 and γ tokens. The output
    distribution is unchanged, because where a draft stops depends only on the draft.
    """
    check_inputs([expert, amateur], input_ids, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                 generator=generator, rollback=True)
    _check_pair_args(gamma=gamma)
    check_confidence_threshold(confidence_threshold)
    exp, ama = CachedModel(expert, input_ids), CachedModel(amateur, input_ids)

    def propose(n_draft: int) -> tuple[list[int], list[torch.Tensor]]:
        ama.follow(exp.tokens)  # the accepted drafts + the expert's token; a rejected draft is rolled back
        draft: list[int] = []
        qs: list[torch.Tensor] = []
        for _ in range(n_draft):
            logits = ama.logits()[-1]
            q = probabilities(logits, temperature, top_k, top_p)
            draft.append(_pick(q, temperature, generator))
            qs.append(q)
            ama.append(draft[-1:])
            if not confident(logits, draft[-1], confidence_threshold):
                break
        return draft, qs

    result = draft_and_verify(exp, propose, max_new_tokens=max_new_tokens, gamma=gamma, temperature=temperature,
                              top_k=top_k, top_p=top_p, generator=generator, eos=_eos_set(eos_token_id))
    result.stats.amateur_calls = ama.calls
    return result
