"""Three ways to decode, each with a KV cache, each returning a :class:`Generation`.

* :func:`naive` -- one model, one token per forward pass (notebook 01): greedy, temperature, top-k, top-p.
* :func:`contrastive` -- Li et al. 2022, "Contrastive Decoding" (notebook 02): among the tokens the expert finds
  plausible, V_head = {x : p_exp(x) >= α · max_w p_exp(w)}, pick argmax log p_exp(x) - log p_ama(x).
* :func:`speculative` -- Leviathan et al. 2023, Algorithm 1 / Chen et al. 2023 (notebook 03): the amateur drafts
  γ tokens, the expert scores all of them in one forward pass, modified rejection sampling keeps exactly the
  expert's distribution.

Notation follows Leviathan et al.: **p is the expert (target), q the amateur (draft)**.
``temperature=0`` means greedy everywhere. Every function takes a (1, T) LongTensor prompt and returns only the
new tokens.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
from transformers import DynamicCache, PreTrainedModel

EosIds = int | Sequence[int] | None


# ------------------------------------------------------------------------------------------ results
@dataclass
class Stats:
    """Counters of one generation. The speculative fields stay empty for the other methods."""

    expert_calls: int = 0
    amateur_calls: int = 0
    proposed: int = 0
    accepted: int = 0
    accepted_per_iteration: list[int] = field(default_factory=list)
    betas: list[float] = field(default_factory=list)
    """β = Σ_x min(p(x), q(x)) = 1 - TV(p, q) at every draft position on the accepted path."""

    @property
    def acceptance_rate(self) -> float:
        """Accepted draft tokens / proposed draft tokens (NaN when nothing was proposed)."""
        return self.accepted / self.proposed if self.proposed else math.nan

    @property
    def mean_beta(self) -> float:
        """The estimate of α = E[β], Leviathan et al. Definition 3.1 (NaN without draft positions)."""
        return sum(self.betas) / len(self.betas) if self.betas else math.nan


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


@dataclass
class Generation:
    new_token_ids: list[int]
    stats: Stats = field(default_factory=Stats)
    trace: list = field(default_factory=list)
    """SpecIteration per round (speculative), ContrastiveStep per token (contrastive), empty for naive."""

    @property
    def tokens_per_expert_call(self) -> float:
        return len(self.new_token_ids) / self.stats.expert_calls if self.stats.expert_calls else math.nan


# ---------------------------------------------------------------------------------- input checking
def _device(model: PreTrainedModel) -> torch.device:
    return next(model.parameters()).device


def _context_length(model: PreTrainedModel) -> int | None:
    return getattr(model.config, "max_position_embeddings", None)


def check_inputs(models: Sequence[PreTrainedModel], input_ids: torch.Tensor, max_new_tokens: int, *,
                 temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None) -> None:
    """Raise a TypeError/ValueError that says what to do for every kind of bad input the decoders refuse."""
    if not isinstance(input_ids, torch.Tensor):
        raise TypeError(f"input_ids must be a torch.Tensor, got {type(input_ids).__name__}; "
                        "use tokenizer(text, return_tensors='pt').input_ids or pair.encode(text)")
    if input_ids.dtype != torch.long:
        raise TypeError(f"input_ids must hold token ids as torch.long, got {input_ids.dtype}; use input_ids.long()")
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must have shape (1, T), got {tuple(input_ids.shape)}; "
                         "add the batch dimension with input_ids[None]")
    if input_ids.shape[0] != 1:
        raise ValueError(f"batch size must be 1, got {input_ids.shape[0]}: decode one prompt at a time")
    if input_ids.shape[1] == 0:
        raise ValueError("the prompt is empty: give at least one token (e.g. the BOS token)")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, int | float) or not temperature >= 0:
        raise ValueError(f"temperature must be a number >= 0 (0 means greedy), got {temperature!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k must be an int >= 1 or None (no top-k filter), got {top_k!r}")
    if top_p is not None and not (isinstance(top_p, int | float) and 0 < top_p <= 1):
        raise ValueError(f"top_p must be in (0, 1] or None (no nucleus filter), got {top_p!r}")
    devices = {str(_device(m)) for m in models}
    if len(devices) > 1:
        raise ValueError(f"the models are on different devices ({sorted(devices)}): move both with .to(device)")
    if str(input_ids.device) not in devices:
        raise ValueError(f"input_ids is on {input_ids.device} but the model on {devices.pop()}: "
                         "use input_ids.to(model.device)")
    vocab_sizes = {m.get_output_embeddings().weight.shape[0] for m in models}
    if len(vocab_sizes) > 1:
        raise ValueError(f"expert and amateur have different vocabulary sizes {sorted(vocab_sizes)}: "
                         "use two models that share one tokenizer (see helpers.models.load_pair)")
    for model in models:
        context = _context_length(model)
        if context is not None and input_ids.shape[1] + max_new_tokens > context:
            raise ValueError(f"prompt ({input_ids.shape[1]} tokens) + max_new_tokens ({max_new_tokens}) exceeds "
                             f"the model's context of {context} tokens: shorten the prompt or max_new_tokens")


def _eos_set(eos_token_id: EosIds) -> frozenset[int]:
    if eos_token_id is None:
        return frozenset()
    return frozenset([eos_token_id] if isinstance(eos_token_id, int) else eos_token_id)


# ------------------------------------------------------------------------- distributions and sampling
def probabilities(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                  top_p: float | None = None) -> torch.Tensor:
    """The distribution a sampler draws from: softmax(logits / T), restricted to the top-k tokens and to the
    smallest set whose probability reaches top_p (nucleus, Holtzman et al. 2020), then renormalised.
    ``temperature=0`` gives a one-hot vector on the argmax (greedy). Works on the last dimension, in fp32.
    """
    logits = logits.float()
    if temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    logits = logits / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, -math.inf)
    probs = torch.softmax(logits, dim=-1)
    if top_p is not None and top_p < 1:
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
        mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
        drop = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, order, mass_before >= top_p)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def sample(probs: torch.Tensor, generator: torch.Generator | None = None) -> int:
    """Draw one token id from a probability vector (on the generator's device, so seeds reproduce)."""
    if generator is not None and probs.device != generator.device:
        probs = probs.to(generator.device)
    return int(torch.multinomial(probs, 1, generator=generator))


def _uniform(generator: torch.Generator | None) -> float:
    device = generator.device if generator is not None else "cpu"
    return float(torch.rand((), generator=generator, device=device))


def _pick(probs: torch.Tensor, temperature: float, generator: torch.Generator | None) -> int:
    return int(probs.argmax()) if temperature == 0 else sample(probs, generator)


# ------------------------------------------------------------------------------ the model with a cache
class CachedModel:
    """A model plus its KV cache and the token sequence the cache belongs to.

    ``feed(ids)`` runs the model only on the tokens the cache has not seen and returns the logits of the last
    ``keep`` positions; ``rollback(n)`` forgets the last n tokens (a rejected draft). Without a cache
    (``use_cache=False``) every call recomputes the whole sequence, as the source article does.
    """

    def __init__(self, model: PreTrainedModel, prompt: torch.Tensor, use_cache: bool = True) -> None:
        self.model = model
        self.tokens = prompt
        self.cache = DynamicCache(config=model.config) if use_cache else None
        self.calls = 0
        self._logits_to_keep = "logits_to_keep" in inspect.signature(model.forward).parameters

    @property
    def cached(self) -> int:
        return self.cache.get_seq_length() if self.cache is not None else 0

    @torch.no_grad()
    def logits(self, keep: int = 1) -> torch.Tensor:
        """Logits of the last ``keep`` positions of ``self.tokens``, shape (keep, vocab)."""
        new = self.tokens[:, self.cached:]
        kwargs = {"logits_to_keep": keep} if self._logits_to_keep else {}
        out = self.model(new, past_key_values=self.cache, use_cache=self.cache is not None, **kwargs)
        self.calls += 1
        return out.logits[0, -keep:]

    def append(self, token_ids: Sequence[int]) -> None:
        extra = torch.tensor([list(token_ids)], dtype=torch.long, device=self.tokens.device)
        self.tokens = torch.cat([self.tokens, extra], dim=1)

    def rollback(self, n: int) -> None:
        """Forget the last n tokens, from the sequence and (where it holds them) from the cache."""
        if n <= 0:
            return
        self.tokens = self.tokens[:, :-n]
        excess = self.cached - self.tokens.shape[1]
        if self.cache is not None and excess > 0:
            self.cache.crop(-excess)  # transformers 5: a negative number = how many tokens to drop


# ------------------------------------------------------------------------------------------ decoders
def naive(model: PreTrainedModel, input_ids: torch.Tensor, *, max_new_tokens: int, temperature: float = 1.0,
          top_k: int | None = None, top_p: float | None = None, use_cache: bool = True,
          generator: torch.Generator | None = None, eos_token_id: EosIds = None) -> Generation:
    """Autoregressive decoding with one model (notebook 01): one forward pass per new token.

    ``use_cache=False`` re-reads the whole prefix at every step (quadratic work), like the source article.
    """
    check_inputs([model], input_ids, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p)
    eos = _eos_set(eos_token_id)
    lm = CachedModel(model, input_ids, use_cache)
    new: list[int] = []
    while len(new) < max_new_tokens:
        token = _pick(probabilities(lm.logits()[-1], temperature, top_k, top_p), temperature, generator)
        new.append(token)
        lm.append([token])
        if token in eos:
            break
    return Generation(new, Stats(expert_calls=lm.calls))


def _check_pair_args(alpha: float | None = None, amateur_temperature: float | None = None,
                     gamma: int | None = None) -> None:
    if alpha is not None and not (isinstance(alpha, int | float) and 0 < alpha <= 1):
        raise ValueError(f"alpha must be in (0, 1] (the paper uses 0.1), got {alpha!r}")
    if amateur_temperature is not None and not (
            isinstance(amateur_temperature, int | float) and amateur_temperature > 0):
        raise ValueError(f"amateur_temperature must be > 0 (the paper uses 0.5 or 1), got {amateur_temperature!r}")
    if gamma is not None and (isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 1):
        raise ValueError(f"gamma (draft length) must be an int >= 1, got {gamma!r}")


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


def speculative(expert: PreTrainedModel, amateur: PreTrainedModel, input_ids: torch.Tensor, *,
                max_new_tokens: int, gamma: int = 4, temperature: float = 1.0, top_k: int | None = None,
                top_p: float | None = None, generator: torch.Generator | None = None,
                eos_token_id: EosIds = None) -> Generation:
    """Speculative sampling, Leviathan et al. 2023 Algorithm 1 (notebook 03).

    Each iteration: the amateur samples γ draft tokens x_i ~ q_i; the expert scores prefix + drafts in **one**
    forward pass, giving p_1..p_{γ+1}; draft i is accepted with probability min(1, p_i(x_i) / q_i(x_i)); at the
    first rejection a token is drawn from norm(max(0, p_i - q_i)) and the round ends; if all γ are accepted a
    bonus token is drawn from p_{γ+1}. p and q are transformed alike (temperature, top-k, top-p), so the output
    is distributed exactly as :func:`naive` sampling from the expert with the same settings. Both KV caches are
    cropped back to the accepted prefix after a rejection.
    """
    check_inputs([expert, amateur], input_ids, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p)
    _check_pair_args(gamma=gamma)
    eos = _eos_set(eos_token_id)
    exp, ama = CachedModel(expert, input_ids), CachedModel(amateur, input_ids)
    new: list[int] = []
    stats = Stats()
    trace: list[SpecIteration] = []
    while len(new) < max_new_tokens:
        # 1. Draft: γ tokens from the amateur (fewer near the end, so the budget is never exceeded).
        n_draft = min(gamma, max_new_tokens - len(new) - 1)
        draft: list[int] = []
        qs: list[torch.Tensor] = []
        for _ in range(n_draft):
            q = probabilities(ama.logits()[-1], temperature, top_k, top_p)
            draft.append(_pick(q, temperature, generator))
            qs.append(q)
            ama.append(draft[-1:])
        # 2. Verify: one expert forward pass over the unseen prefix + all drafts -> p_1 .. p_{n_draft+1}.
        exp.append(draft)
        ps = probabilities(exp.logits(keep=n_draft + 1), temperature, top_k, top_p)
        # 3. Accept or reject the drafts in order.
        n_accepted, last_token, last_kind = 0, None, "none"
        for i, x in enumerate(draft):
            p_x, q_x = float(ps[i, x]), float(qs[i][x])
            stats.betas.append(float(torch.minimum(ps[i], qs[i]).sum()))
            accepted = p_x >= q_x or (temperature > 0 and _uniform(generator) < p_x / q_x)
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
        # 4. Keep the accepted prefix (+ the expert's token); roll both caches back to it.
        emitted = draft[:n_accepted] + ([last_token] if last_token is not None else [])
        exp.rollback(n_draft - n_accepted)
        ama.rollback(n_draft - n_accepted)
        if last_token is not None:
            exp.append([last_token])
            ama.append([last_token])
        new.extend(emitted)
        stats.proposed += n_draft
        stats.accepted += n_accepted
        stats.accepted_per_iteration.append(n_accepted)
        trace.append(SpecIteration(draft, [float(ps[i, x]) for i, x in enumerate(draft)],
                                   [float(q[x]) for q, x in zip(qs, draft, strict=True)],
                                   n_accepted, last_token, last_kind))
        if stop or last_token in eos:
            break
    stats.expert_calls, stats.amateur_calls = exp.calls, ama.calls
    return Generation(new, stats, trace)
