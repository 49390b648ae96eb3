"""Six ways to decode, each with a KV cache, each returning a :class:`Generation`.

* :func:`naive` -- one model, one token per forward pass (notebook 01): greedy, temperature, top-k, top-p.
* :func:`contrastive` -- Li et al. 2022, "Contrastive Decoding" (notebook 02): among the tokens the expert finds
  plausible, V_head = {x : p_exp(x) >= α · max_w p_exp(w)}, pick argmax log p_exp(x) - log p_ama(x).
* :func:`speculative` -- Leviathan et al. 2023, Algorithm 1 / Chen et al. 2023 (notebook 03): the amateur drafts
  γ tokens, the expert scores all of them in one forward pass, modified rejection sampling keeps exactly the
  expert's distribution.
* :func:`prompt_lookup` -- Saxena 2023, prompt-lookup decoding (notebook 06): the draft is copied from the context
  after an earlier occurrence of its last n-gram, then verified exactly as in :func:`speculative` (no amateur).
* :func:`contrastive_search` -- Su et al. 2022, "A Contrastive Framework for Neural Text Generation", Eq. (5)
  (notebook 06): one model; among its top-k tokens, trade probability against similarity to the context.
* :func:`dola` -- Chuang et al. 2023, "DoLa: Decoding by Contrasting Layers" (notebook 06): one model; its final
  layer is the expert, the early layer it disagrees with most is the amateur.

Notation follows Leviathan et al.: **p is the expert (target), q the amateur (draft)**.
``temperature=0`` means greedy everywhere. Every function takes a (1, T) LongTensor prompt and returns only the
new tokens.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
from transformers import DynamicCache, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

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
    def share_kept(self) -> float:
        """Accepted draft tokens / proposed draft tokens (NaN when nothing was proposed): the share of drafted tokens
        kept, lower than the acceptance rate α (:attr:`mean_beta`), because the rest of a draft after a rejection
        is never judged (notebook 03, "How many tokens per expert call?")."""
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

    @property
    def emitted(self) -> list[int]:
        """The tokens this round adds to the output: the accepted drafts, then the expert's token."""
        return self.draft[:self.n_accepted] + ([self.last_token] if self.last_token is not None else [])


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
class SearchStep:
    """One step of :func:`contrastive_search`: the top-k candidates and the two terms of their score."""

    token_ids: list[int]
    """The model's k most probable next tokens, most probable first."""
    probs: list[float]
    """p(v | x<t), the model confidence."""
    degeneration: list[float]
    """max_j cos(h_v, h_j), the degeneration penalty: similarity to the most similar earlier token."""
    chosen: int


@dataclass
class DolaStep:
    """One step of :func:`dola`: the premature layer the final layer was contrasted with."""

    chosen_layer: int
    """argmax over the candidate layers j of JSD(q_N || q_j)."""
    token: int
    jsd: dict[int, float]
    """JSD(q_N || q_j) for every candidate layer j."""


@dataclass
class Generation:
    new_token_ids: list[int]
    stats: Stats = field(default_factory=Stats)
    trace: list = field(default_factory=list)
    """SpecIteration per round (speculative, prompt_lookup), ContrastiveStep per token (contrastive), SearchStep
    (contrastive_search), DolaStep (dola); empty for naive."""

    @property
    def tokens_per_expert_call(self) -> float:
        return len(self.new_token_ids) / self.stats.expert_calls if self.stats.expert_calls else math.nan


# ---------------------------------------------------------------------------------- input checking
def _device(model: PreTrainedModel) -> torch.device:
    return next(model.parameters()).device


def _vocab_size(model: PreTrainedModel) -> int:
    return model.get_output_embeddings().weight.shape[0]


def _context_length(model: PreTrainedModel) -> int | None:
    return getattr(model.config, "max_position_embeddings", None)


def _is_int(value: object, minimum: int) -> bool:
    """An int (not a bool) >= minimum."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _is_number(value: object) -> bool:
    """An int or a float, not a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _model_name(model: PreTrainedModel) -> str:
    path = getattr(model.config, "name_or_path", "")
    return f"{type(model).__name__} ({path})" if path else type(model).__name__


def _check_rollback(model: PreTrainedModel) -> None:
    """Refuse a model whose KV cache a rejected draft cannot be cropped from (:meth:`CachedModel.rollback`).

    In transformers 5.2x ``DynamicCache.crop`` raises for a sliding-window layer (``DynamicSlidingWindowLayer``,
    ``is_sliding``) once the window is full, and for every linear-attention layer (``LinearAttentionLayer`` and its
    hybrids, ``is_croppable`` False on a fresh cache), unless the cache records its past states
    (``activate_past_recording``), which :class:`CachedModel` does not do. The check is made up front, from the
    model's config, even where a short run would never fill the window.
    """
    layers = DynamicCache(config=model.config).layers
    bad = sorted({type(layer).__name__ for layer in layers
                  if getattr(layer, "is_sliding", False) or not getattr(layer, "is_croppable", True)})
    if bad:
        raise ValueError(f"{_model_name(model)} has sliding-window or linear-attention cache layers ({', '.join(bad)}) "
                         "that transformers' DynamicCache.crop cannot roll back after a rejected draft: speculative "
                         "decoding with this model's cache is not supported here; use transformers' "
                         "model.generate(assistant_model=...) (or prompt_lookup_num_tokens=...) instead")


def check_inputs(models: Sequence[PreTrainedModel], input_ids: torch.Tensor, max_new_tokens: int, *,
                 temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
                 generator: torch.Generator | None = None, rollback: bool = False) -> None:
    """Raise a TypeError/ValueError that says what to do for every kind of bad input the decoders refuse.

    ``rollback=True`` (speculative, prompt lookup) also refuses models whose KV cache cannot be cropped back after
    a rejected draft (:func:`_check_rollback`).
    """
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
    if not _is_int(max_new_tokens, 0):
        raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}: "
                        "pass torch.Generator(model.device).manual_seed(seed), not the seed itself")
    if not (_is_number(temperature) and temperature >= 0):
        raise ValueError(f"temperature must be a number >= 0 (0 means greedy), got {temperature!r}")
    if top_k is not None and not _is_int(top_k, 1):
        raise ValueError(f"top_k must be an int >= 1 or None (no top-k filter), got {top_k!r}")
    if top_p is not None and not (isinstance(top_p, int | float) and 0 < top_p <= 1):
        raise ValueError(f"top_p must be in (0, 1] or None (no nucleus filter), got {top_p!r}")
    devices = {str(_device(m)) for m in models}
    if len(devices) > 1:
        raise ValueError(f"the models are on different devices ({sorted(devices)}): move both with .to(device)")
    if str(input_ids.device) not in devices:
        raise ValueError(f"input_ids is on {input_ids.device} but the model on {devices.pop()}: "
                         "use input_ids.to(model.device)")
    vocab_sizes = {_vocab_size(m) for m in models}
    if len(vocab_sizes) > 1:
        raise ValueError(f"expert and amateur have different vocabulary sizes {sorted(vocab_sizes)}: "
                         "use two models that share one tokenizer (see helpers.models.load_pair)")
    vocab = min(m.get_input_embeddings().weight.shape[0] for m in models)
    low, high = int(input_ids.min()), int(input_ids.max())
    if low < 0 or high >= vocab:
        raise ValueError(f"input_ids must lie in 0..{vocab - 1} (the model's vocabulary has {vocab} tokens); got "
                         f"{'min' if low < 0 else 'max'} {low if low < 0 else high}: encode the text with the pair's "
                         "tokenizer (pair.encode(text))")
    for model in models:
        context = _context_length(model)
        if context is not None and input_ids.shape[1] + max_new_tokens > context:
            raise ValueError(f"prompt ({input_ids.shape[1]} tokens) + max_new_tokens ({max_new_tokens}) exceeds "
                             f"the model's context of {context} tokens: shorten the prompt or max_new_tokens")
        if rollback:
            _check_rollback(model)


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

    Top-k keeps ties: every token whose logit equals the k-th largest stays, so more than k tokens can remain (as
    in transformers' ``TopKLogitsWarper``, which also masks only the logits below the k-th).
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
    """Draw one token id from a probability vector (on the generator's device, so seeds reproduce).

    This and :func:`bernoulli` are the only random draws of the decoders: :func:`helpers.stats.exact_distribution`
    replaces the two to enumerate every outcome of a decoder (notebook 03, the exactness experiment).
    """
    if generator is not None and probs.device != generator.device:
        probs = probs.to(generator.device)
    return int(torch.multinomial(probs, 1, generator=generator))


def bernoulli(probability: float, generator: torch.Generator | None = None) -> bool:
    """True with the given probability: one uniform draw u, True if u < probability (the acceptance test of
    modified rejection sampling, Leviathan et al. Algorithm 1)."""
    device = generator.device if generator is not None else "cpu"
    return float(torch.rand((), generator=generator, device=device)) < probability


def _pick(probs: torch.Tensor, temperature: float, generator: torch.Generator | None) -> int:
    return int(probs.argmax()) if temperature == 0 else sample(probs, generator)


# ------------------------------------------------------------------------------ the model with a cache
class CachedModel:
    """A model plus its KV cache and the token sequence the cache belongs to.

    ``logits(keep)`` (or ``forward``, for the whole output) runs the model only on the tokens the cache has not
    seen and returns the logits of the last ``keep`` positions; ``rollback(n)`` forgets the last n tokens (a
    rejected draft), ``follow(tokens)`` catches up with another model's sequence, ``branch``/``select`` try k
    next tokens as a batch and keep one (contrastive search). Without a cache (``use_cache=False``) every call
    recomputes the whole sequence, as the source article does.
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
    def forward(self, keep: int = 1, **kwargs: object) -> CausalLMOutputWithPast:
        """Run the model on the tokens the cache has not seen (every row of the batch); the output's logits
        cover the last ``keep`` positions. ``kwargs`` go to the model (e.g. ``output_hidden_states=True``)."""
        new = self.tokens[:, self.cached:]
        if self._logits_to_keep:
            kwargs["logits_to_keep"] = keep
        out = self.model(new, past_key_values=self.cache, use_cache=self.cache is not None, **kwargs)
        self.calls += 1
        return out

    def logits(self, keep: int = 1) -> torch.Tensor:
        """Logits of the last ``keep`` positions of ``self.tokens``, shape (keep, vocab)."""
        return self.forward(keep).logits[0, -keep:]

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

    def follow(self, tokens: torch.Tensor) -> None:
        """Make ``tokens`` the sequence: roll back to the longest common prefix, then append the rest."""
        n = min(self.tokens.shape[1], tokens.shape[1])
        agree = int((self.tokens[0, :n] == tokens[0, :n]).cumprod(0).sum())
        self.rollback(self.tokens.shape[1] - agree)
        self.append(tokens[0, agree:].tolist())

    def branch(self, candidates: torch.Tensor) -> None:
        """Continue the sequence with each of k candidate tokens, as a batch of k rows (the cache is repeated k
        times): the next :meth:`forward` scores all of them in one pass; :meth:`select` keeps one row."""
        self.cache.batch_repeat_interleave(candidates.shape[0])
        self.tokens = torch.cat([self.tokens.expand(candidates.shape[0], -1), candidates[:, None]], dim=1)

    def select(self, row: int) -> None:
        """Keep only row ``row`` of a :meth:`branch` (its tokens and its cache)."""
        self.cache.batch_select_indices(torch.tensor([row], device=self.tokens.device))
        self.tokens = self.tokens[row:row + 1]


# ------------------------------------------------------------------------------------------ decoders
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
    while len(new) < max_new_tokens:
        logits = lm.logits()[-1]
        if repetition_penalty != 1.0:
            logits = penalize_repetition(logits, lm.tokens[0], repetition_penalty)
        token = _pick(probabilities(logits, temperature, top_k, top_p), temperature, generator)
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
    if gamma is not None and not _is_int(gamma, 1):
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


Proposer = Callable[[int], tuple[list[int], Sequence[torch.Tensor] | torch.Tensor]]
"""``propose(n)`` -> (at most n draft tokens x_i, their draft distributions q_i): one round's draft."""


def _draft_and_verify(exp: CachedModel, propose: Proposer, *, max_new_tokens: int, gamma: int, temperature: float,
                      top_k: int | None, top_p: float | None, generator: torch.Generator | None,
                      eos: frozenset[int]) -> Generation:
    """Leviathan et al. Algorithm 1 with any drafter: the loop of :func:`speculative` and :func:`prompt_lookup`.

    Each round: ``propose`` drafts up to γ tokens x_i with distributions q_i; the expert scores prefix + drafts in
    **one** forward pass, giving p_1..p_{n+1}; draft i is accepted with probability min(1, p_i(x_i) / q_i(x_i));
    at the first rejection a token is drawn from norm(max(0, p_i - q_i)) and the round ends; if all drafts are
    accepted a bonus token is drawn from p_{n+1}. Whatever q is, the output is distributed exactly as sampling
    from p (Appendix A.1). The expert's cache is cropped back to the accepted prefix after a rejection.
    """
    new: list[int] = []
    stats = Stats()
    trace: list[SpecIteration] = []
    while len(new) < max_new_tokens:
        # 1. Draft: at most γ tokens (fewer near the end, so the budget is never exceeded).
        draft, qs = propose(min(gamma, max_new_tokens - len(new) - 1))
        n_draft = len(draft)
        # 2. Verify: one expert forward pass over the unseen prefix + all drafts -> p_1 .. p_{n_draft+1}.
        exp.append(draft)
        ps = probabilities(exp.logits(keep=n_draft + 1), temperature, top_k, top_p)
        # 3. Accept or reject the drafts in order.
        n_accepted, last_token, last_kind = 0, None, "none"
        for i, x in enumerate(draft):
            p_x, q_x = float(ps[i, x]), float(qs[i][x])
            stats.betas.append(float(torch.minimum(ps[i], qs[i]).sum()))
            accepted = p_x >= q_x or (temperature > 0 and bernoulli(p_x / q_x, generator))
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
        if stop or last_token in eos:
            break
    stats.expert_calls = exp.calls
    return Generation(new, stats, trace)


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
    cropped back to the accepted prefix after a rejection, so models whose cache cannot be cropped (sliding-window
    or linear-attention layers) are refused up front (:func:`_check_rollback`).
    """
    check_inputs([expert, amateur], input_ids, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                 generator=generator, rollback=True)
    _check_pair_args(gamma=gamma)
    exp, ama = CachedModel(expert, input_ids), CachedModel(amateur, input_ids)

    def propose(n_draft: int) -> tuple[list[int], list[torch.Tensor]]:
        ama.follow(exp.tokens)  # the accepted drafts + the expert's token; a rejected draft is rolled back
        draft: list[int] = []
        qs: list[torch.Tensor] = []
        for _ in range(n_draft):
            q = probabilities(ama.logits()[-1], temperature, top_k, top_p)
            draft.append(_pick(q, temperature, generator))
            qs.append(q)
            ama.append(draft[-1:])
        return draft, qs

    result = _draft_and_verify(exp, propose, max_new_tokens=max_new_tokens, gamma=gamma, temperature=temperature,
                               top_k=top_k, top_p=top_p, generator=generator, eos=_eos_set(eos_token_id))
    result.stats.amateur_calls = ama.calls
    return result


# ----------------------------------------------------------------------------------- prompt lookup
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

    return _draft_and_verify(exp, propose, max_new_tokens=max_new_tokens, gamma=gamma, temperature=temperature,
                             top_k=top_k, top_p=top_p, generator=generator, eos=_eos_set(eos_token_id))


# ------------------------------------------------------------------------------ contrastive search
def contrastive_search(model: PreTrainedModel, input_ids: torch.Tensor, *, max_new_tokens: int,
                       penalty_alpha: float = 0.6, top_k: int = 4, eos_token_id: EosIds = None) -> Generation:
    """Contrastive search, Su et al. 2022, "A Contrastive Framework for Neural Text Generation", Eq. (5)
    (notebook 06; transformers' ``generate(penalty_alpha=α, top_k=k)`` before 4.56).

    x_t = argmax over the model's top-k tokens v of (1 - α) · p(v | x<t) - α · max_j cos(h_v, h_j): h_v is the
    last hidden state (the final layer's output, after its norm) of v appended to the context, h_j those of
    every earlier token, prompt included. The penalty pushes away from continuations that look like something
    already said, the cure for greedy's loops. The k candidates are scored in **one** batched forward pass on
    the KV cache repeated k times; the chosen row's cache and hidden state are kept. ``penalty_alpha=0`` is
    greedy decoding. One forward pass per token (+ the prompt's).
    """
    check_inputs([model], input_ids, max_new_tokens)
    if not (_is_number(penalty_alpha) and 0 <= penalty_alpha <= 1):
        raise ValueError(f"penalty_alpha must be in [0, 1] (0 = greedy; Su et al. use 0.6), got {penalty_alpha!r}")
    if not _is_int(top_k, 1):
        raise ValueError(f"top_k (candidates per step) must be an int >= 1 (e.g. 4), got {top_k!r}")
    eos = _eos_set(eos_token_id)
    new: list[int] = []
    trace: list[SearchStep] = []
    lm = CachedModel(model, input_ids)
    if max_new_tokens == 0:
        return Generation(new)
    out = lm.forward(output_hidden_states=True)
    context = torch.nn.functional.normalize(out.hidden_states[-1][0].float(), dim=-1)  # h_j / |h_j|, (T, H)
    logits = out.logits[0, -1]
    while len(new) < max_new_tokens:
        probs, candidates = torch.topk(torch.softmax(logits.float(), dim=-1), min(top_k, logits.shape[-1]))
        lm.branch(candidates)
        out = lm.forward(output_hidden_states=True)
        h = torch.nn.functional.normalize(out.hidden_states[-1][:, -1].float(), dim=-1)  # (k, H)
        degeneration = (h @ context.T).max(dim=-1).values
        best = int(((1 - penalty_alpha) * probs - penalty_alpha * degeneration).argmax())
        lm.select(best)
        context = torch.cat([context, h[best:best + 1]])
        logits = out.logits[best, -1]
        token = int(candidates[best])
        trace.append(SearchStep(candidates.tolist(), probs.tolist(), degeneration.tolist(), token))
        new.append(token)
        if token in eos:
            break
    return Generation(new, Stats(expert_calls=lm.calls), trace)


# -------------------------------------------------------------------------------------------- DoLa
def dola_low_layers(model: PreTrainedModel) -> list[int]:
    """DoLa's default candidate premature layers, the "low" bucket of Chuang et al. / transformers: every second
    layer of the first half, 0 being the embedding output (for N > 40 layers: 0, 2, .., 18).

    As in transformers, a model whose LM head *is* its embedding matrix (tied, e.g. SmolLM2) starts at layer 2:
    reading the embedding output through the tied head mostly predicts the input token again.
    """
    n_layers = model.config.num_hidden_layers
    tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    start = min(2, n_layers - 1) if tied else 0
    end = n_layers // 2 if n_layers <= 40 else 20
    return list(range(start, max(end, start + 1), 2))


def _check_premature_layers(model: PreTrainedModel, layers: Sequence[int] | None) -> list[int]:
    n_layers = model.config.num_hidden_layers
    if layers is None:
        return dola_low_layers(model)
    if isinstance(layers, str) or not isinstance(layers, Sequence) or not layers:
        raise ValueError(f"premature_layers must be a non-empty list of layer indices (or None for the 'low' "
                         f"bucket {dola_low_layers(model)}), got {layers!r}")
    bad = [j for j in layers if not (_is_int(j, 0) and j < n_layers)]
    if bad:
        raise ValueError(f"premature_layers {bad} are not layers of this {n_layers}-layer model: use indices in "
                         f"0..{n_layers - 1} (0 = the embedding output; {n_layers} is the final layer itself)")
    return list(dict.fromkeys(layers))  # without repetitions, in the given order


def jensen_shannon(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """JSD(p || q) = ½ KL(p || m) + ½ KL(q || m), m = ½ (p + q), from log-probabilities (last dimension)."""
    log_m = torch.logaddexp(log_p, log_q) - math.log(2)
    return 0.5 * ((log_p.exp() * (log_p - log_m)).sum(-1) + (log_q.exp() * (log_q - log_m)).sum(-1))


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


def dola(model: PreTrainedModel, input_ids: torch.Tensor, *, max_new_tokens: int,
         premature_layers: Sequence[int] | None = None, alpha: float = 0.1, repetition_penalty: float = 1.2,
         final_norm: bool = True, eos_token_id: EosIds = None) -> Generation:
    """DoLa, Chuang et al. 2023, "DoLa: Decoding by Contrasting Layers Improves Factuality in Large Language
    Models" (notebook 06; transformers' ``generate(dola_layers=...)`` before 4.56), greedy, KV-cached.

    Contrastive decoding inside one model: the expert is the final layer, q_N = softmax(logits); the amateur
    an early exit q_j = softmax(lm_head(norm(h_j))) of a premature layer j, chosen anew at every step as the
    candidate layer whose distribution differs most from the final one, M = argmax_j JSD(q_N || q_j). The token
    is argmax over V_head = {x : q_N(x) >= α · max q_N} of log q_N(x) - log q_M(x) (:func:`contrastive_scores`).

    * **Final norm.** The early exits go through the model's final norm, as the early-exit amateur of
      :func:`helpers.models.early_exit` does (the "logit lens"). The authors' code (voidism/DoLa) and
      transformers' implementation applied the LM head to the raw hidden state instead; applying the norm is
      the open request voidism/DoLa#9. Without it, the scale of h_j (growing with depth) acts as a per-layer
      temperature of q_j. ``final_norm=False`` reads the raw hidden state, as the paper's code does.
    * **Layers.** ``premature_layers=None`` is the "low" bucket (:func:`dola_low_layers`); 0 = embedding output.
    * **Repetition penalty.** DoLa alone tends to repeat itself; the paper and transformers recommend CTRL's
      penalty 1.2 (:func:`penalize_repetition`), applied here to the contrast score of every token of the prompt
      and output so far, before the argmax. ``repetition_penalty=1.0`` switches it off.

    ``trace`` holds a :class:`DolaStep` per token (the chosen premature layer and all JSDs).
    """
    check_inputs([model], input_ids, max_new_tokens)
    _check_pair_args(alpha=alpha)
    norm, head = getattr(getattr(model, "model", None), "norm", None), getattr(model, "lm_head", None)
    if norm is None or head is None:
        raise ValueError(f"dola reads early layers through the final norm and the LM head of a Llama-style model "
                         f"(model.model.norm, model.lm_head); {type(model).__name__} has none. Use a Llama-style "
                         "model such as the pocket expert.")
    layers = _check_premature_layers(model, premature_layers)
    if not isinstance(final_norm, bool):
        raise TypeError(f"final_norm must be True or False, got {final_norm!r}")
    _check_penalty(repetition_penalty)
    eos = _eos_set(eos_token_id)
    lm = CachedModel(model, input_ids)
    new: list[int] = []
    trace: list[DolaStep] = []
    while len(new) < max_new_tokens:
        out = lm.forward(output_hidden_states=True)
        log_q_final = torch.log_softmax(out.logits[0, -1].float(), dim=-1)
        with torch.no_grad():
            hidden = torch.stack([out.hidden_states[j][0, -1] for j in layers])
            early = head(norm(hidden) if final_norm else hidden).float()
        jsd = jensen_shannon(log_q_final, torch.log_softmax(early, dim=-1))
        chosen = int(jsd.argmax())
        scores = contrastive_scores(log_q_final, early[chosen], alpha).scores
        token = int(penalize_repetition(scores, lm.tokens[0], repetition_penalty).argmax())
        trace.append(DolaStep(layers[chosen], token, dict(zip(layers, jsd.tolist(), strict=True))))
        new.append(token)
        lm.append([token])
        if token in eos:
            break
    return Generation(new, Stats(expert_calls=lm.calls), trace)
