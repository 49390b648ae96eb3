"""What every decoder shares (notebooks 01-06): the results (:class:`Stats`, :class:`Generation`), the input
checks, the sampling distribution with its two random draws (:func:`sample`, :func:`bernoulli`), and
:class:`CachedModel`, a model with a KV cache that can roll back."""

from __future__ import annotations

import inspect
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

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
    head_calls: int = 0
    """Draft-head forward passes where a head drafts beside an amateur (notebook 08); a head alone counts as the
    amateur."""
    proposed: int = 0
    accepted: int = 0
    accepted_per_iteration: list[int] = field(default_factory=list)
    betas: list[float] = field(default_factory=list)
    """β = Σ_x min(p(x), q(x)) = 1 - TV(p, q) at every draft position on the accepted path."""
    round_seconds: list[float] = field(default_factory=list)
    """Wall-clock seconds of every round: one draft -> verify -> accept round of a speculative loop
    (:func:`~helpers.decoding.speculation.draft_and_verify`), one token's step of naive decoding; the first
    also reads the prompt. The speed protocol times a whole drafting round with it, beside naive decoding's step
    (:func:`helpers.speed.round_costs`)."""

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
    head = model.get_output_embeddings()  # a converted layer (helpers.kernels) may keep no plain .weight
    return head.out_features if hasattr(head, "out_features") else head.weight.shape[0]


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


def _check_pair_args(alpha: float | None = None, amateur_temperature: float | None = None,
                     gamma: int | None = None) -> None:
    if alpha is not None and not (isinstance(alpha, int | float) and 0 < alpha <= 1):
        raise ValueError(f"alpha must be in (0, 1] (the paper uses 0.1), got {alpha!r}")
    if amateur_temperature is not None and not (
            isinstance(amateur_temperature, int | float) and amateur_temperature > 0):
        raise ValueError(f"amateur_temperature must be > 0 (the paper uses 0.5 or 1), got {amateur_temperature!r}")
    if gamma is not None and not _is_int(gamma, 1):
        raise ValueError(f"gamma (draft length) must be an int >= 1, got {gamma!r}")


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
def expert_features(hidden_states: Sequence[torch.Tensor], layers: Sequence[int] = (-1,)) -> torch.Tensor:
    """What a draft head reads from a model output's ``hidden_states`` (transformers: index 0 is the embedding
    output, i the output of decoder layer i, -1 the last hidden state after the final norm, the same tensor as
    ``last_hidden_state``): the hidden states of ``layers`` side by side on the last axis. ``(-1,)`` is EAGLE-1's
    feature f_t; several layers are EAGLE-3's fused features (:class:`helpers.heads.DraftHead`)."""
    return torch.cat([hidden_states[i] for i in layers], dim=-1) if len(layers) > 1 else hidden_states[layers[0]]


class CachedModel:
    """A model plus its KV cache and the token sequence the cache belongs to.

    ``logits(keep)`` (or ``forward``, for the whole output) runs the model only on the tokens the cache has not
    seen and returns the logits of the last ``keep`` positions; ``rollback(n)`` forgets the last n tokens (a
    rejected draft), ``follow(tokens)`` catches up with another model's sequence, ``branch``/``select`` try k
    next tokens as a batch and keep one (contrastive search). Without a cache (``use_cache=False``) every call
    recomputes the whole sequence, as the source article does. ``keep_features=True`` also keeps the model's
    last hidden state at every cached position (:attr:`features`), for a draft head (notebook 07); with
    ``feature_layers`` the hidden states a head with fused features reads (:func:`expert_features`).
    """

    def __init__(self, model: PreTrainedModel, prompt: torch.Tensor, use_cache: bool = True,
                 keep_features: bool = False, feature_layers: Sequence[int] = (-1,)) -> None:
        if keep_features and not use_cache:
            raise ValueError("keep_features needs use_cache=True: the features are kept position by position")
        self.model = model
        self.tokens = prompt
        self.cache = DynamicCache(config=model.config) if use_cache else None
        self.calls = 0
        self._logits_to_keep = "logits_to_keep" in inspect.signature(model.forward).parameters
        self.keep_features = keep_features
        self.feature_layers = tuple(feature_layers)
        self.features: torch.Tensor | None = None
        """With ``keep_features``: (cached, hidden), the last hidden state (after the final norm: the input of the
        LM head) at every position the cache holds, rolled back with it; None before the first forward pass."""

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
        if self.keep_features:
            kwargs["output_hidden_states"] = True
        out = self.model(new, past_key_values=self.cache, use_cache=self.cache is not None, **kwargs)
        self.calls += 1
        if self.keep_features:
            latest = expert_features(out.hidden_states, self.feature_layers)[0]
            self.features = latest if self.features is None else torch.cat([self.features, latest])
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
            if self.features is not None:
                self.features = self.features[:self.cached]

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
