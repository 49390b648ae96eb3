"""Draft heads (notebook 07): a drafter that reads the expert's own features, EAGLE-style.

Li et al. 2024, "EAGLE: Speculative Sampling Requires Rethinking Feature Uncertainty" (EAGLE-1). The expert's
**feature** f_t is its last hidden state at position t, after the final norm: the vector its LM head turns into
the logits of token t+1. The head predicts the *next feature* from the current one and the token that was
actually chosen (which removes the sampling uncertainty that makes features hard to predict):

    f̂_{t+1} = Layer(W_fc [e(x_{t+1}); f_t] + b_fc)            one Llama decoder layer with the expert's shape,
    q(x) = softmax(W_head[V_draft] f̂_{t+1})(x), x in V_draft    read out through the expert's own LM head rows.

e is the expert's (frozen) token embedding, W_head its (frozen) LM head. The head keeps its own KV cache over the
positions, like any decoder layer. Drafting γ tokens: step 1 reads the expert's true feature, steps 2..γ the
head's own predictions f̂ (their errors accumulate; EAGLE-1 trains with noisy features against that).

**Fused features** (EAGLE-3, Li et al. 2025, section 3): a head may read, instead of f_t alone, the expert's hidden
states of a low, a middle and its last layer, ``feature_layers`` (indices into transformers' ``hidden_states``:
0 is the embedding output, i the output of decoder layer i, -1 is f_t), each RMS-normalised per position (the middle
layers' residual stream reaches an RMS in the hundreds at the first position) and fused by one more linear map,
g_t = W_g [n(h^low_t); n(h^mid_t); n(f_t)], in place of f_t. EAGLE-3 takes its high feature three layers before the
end and drops the feature target; this head keeps f as its high feature and its target, so one readout and one loss
serve both kinds. From the second draft step the head reads its own f̂, not g: the training-time test trains that switch.

**Trimmed draft vocabulary** (EAGLE-3, FR-Spec): the readout uses only the rows of the N tokens the expert writes
most often, V_draft, because the 49,152-row LM head is about a fifth of the expert's compute. Exactness is
untouched: the verification uses the expert's full p, and a token outside V_draft has q = 0, so it is never drafted
(the expert can still emit it, as a resampled or bonus token).

:func:`head_speculative` is speculative decoding with the head as the drafter: the loop is
:func:`helpers.decoding.speculation.draft_and_verify`, unchanged, and the expert's verification pass also returns
the features the head needs for the next round (:class:`~helpers.decoding.core.CachedModel` with
``keep_features``), so there is no second expert pass. Training: :mod:`helpers.train_head`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import DynamicCache, LlamaConfig, PreTrainedModel
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

from helpers.data import HEAD_FOLDER
from helpers.decoding.core import (
    CachedModel,
    EosIds,
    Generation,
    _check_pair_args,
    _eos_set,
    _pick,
    _vocab_size,
    check_inputs,
    expert_features,
    probabilities,
)
from helpers.decoding.speculation import check_confidence_threshold, confident, draft_and_verify
from helpers.kernels import dense_weight


def head_config(expert: PreTrainedModel, feature_layers: Sequence[int] = (-1,)) -> LlamaConfig:
    """The expert's own layer shape, one layer deep (what EAGLE-1 uses: one decoder layer of the target); a head with
    fused features also stores which of the expert's layers it reads."""
    fused = {"feature_layers": list(feature_layers)} if tuple(feature_layers) != (-1,) else {}
    config = LlamaConfig(**{**expert.config.to_dict(), "num_hidden_layers": 1, **fused})
    config._attn_implementation = "sdpa"
    return config


def fused_layers(expert: PreTrainedModel) -> tuple[int, int, int]:
    """EAGLE-3's low and middle layers (the outputs of the expert's second layer and of its middle one), and f."""
    n = expert.config.num_hidden_layers
    if n < 4:
        raise ValueError(f"fused features read three different layers: the expert has {n}, use one of 4 or more")
    return 2, n // 2, -1


class DraftHead(torch.nn.Module):
    """EAGLE-1's draft head: ``fc`` fuses [e(x_{t+1}); f_t], ``layer`` predicts f̂_{t+1}; the expert's embedding and
    LM head rows of V_draft (``vocab``) are attached, frozen, by :meth:`attach` and never saved with the head. With
    ``config.feature_layers`` (EAGLE-3's fused features) ``fuse`` (W_g) first maps the layers' hidden states to g_t."""

    def __init__(self, config: LlamaConfig, vocab: torch.Tensor) -> None:
        super().__init__()
        d = config.hidden_size
        self.config = config
        self.feature_layers: tuple[int, ...] = tuple(getattr(config, "feature_layers", None) or (-1,))
        """The expert's hidden states the head reads (:func:`helpers.decoding.core.expert_features`); the last is f."""
        if self.feature_layers[-1] != -1:
            raise ValueError(f"feature_layers must end with -1 (f, the head's target), got {self.feature_layers}")
        self.fuse = torch.nn.Linear(len(self.feature_layers) * d, d, bias=False) if self.fused else None
        self.fc = torch.nn.Linear(2 * d, d, bias=True)
        self.layer = LlamaDecoderLayer(config, layer_idx=0)
        self.layer.input_layernorm = torch.nn.Identity()  # EAGLE: the fused input is not normalised again
        self.rotary = LlamaRotaryEmbedding(config)
        self.register_buffer("vocab", torch.as_tensor(vocab, dtype=torch.long))
        """V_draft: the token ids the head can draft, (N,)."""
        self.embedding: torch.Tensor | None = None
        self.readout: torch.Tensor | None = None

    @classmethod
    def for_expert(cls, expert: PreTrainedModel, vocab: torch.Tensor, seed: int = 0,
                   feature_layers: Sequence[int] = (-1,)) -> DraftHead:
        """A freshly initialised head for ``expert`` with draft vocabulary ``vocab``, attached to the expert (a head
        with fused features draws ``fuse`` after the rest, so the rest starts as an unfused head's)."""
        torch.manual_seed(seed)
        head = cls(head_config(expert), vocab)
        if tuple(feature_layers) != (-1,):
            unfused = head.state_dict()
            head = cls(head_config(expert, feature_layers), vocab)
            head.load_state_dict({**head.state_dict(), **unfused})
        return head.to(device=expert.device, dtype=expert.dtype).attach(expert)

    @property
    def fused(self) -> bool:
        """Whether the head reads several of the expert's layers (EAGLE-3) rather than f_t alone (EAGLE-1)."""
        return len(self.feature_layers) > 1

    def read(self, features: torch.Tensor) -> torch.Tensor:
        """The head's input feature: f_t, or a predicted f̂ (last axis d), as it is; the expert's hidden states of
        ``feature_layers`` side by side (last axis k·d, a fused head) as g_t = W_g [n(h_1); ...; n(h_k)], with n the
        RMS normalisation of each position's vector."""
        d = self.config.hidden_size
        if features.shape[-1] == d:
            return features
        if self.fuse is None or features.shape[-1] != len(self.feature_layers) * d:
            raise ValueError(f"features of size {features.shape[-1]}: this head reads {d} (f_t) or "
                             f"{len(self.feature_layers)} x {d} (its feature_layers {self.feature_layers})")
        blocks = torch.nn.functional.rms_norm(features.unflatten(-1, (-1, d)), (d,), eps=self.config.rms_norm_eps)
        return self.fuse(blocks.flatten(-2))

    def attach(self, expert: PreTrainedModel) -> DraftHead:
        """Read the expert's token embedding and its LM head rows for V_draft (frozen copies of references)."""
        if _vocab_size(expert) <= int(self.vocab.max()):
            raise ValueError(f"the head's vocabulary has token ids up to {int(self.vocab.max())}, the expert only "
                             f"{_vocab_size(expert)} tokens: this head was trained for another expert")
        if expert.config.hidden_size != self.config.hidden_size:
            raise ValueError(f"the head reads features of size {self.config.hidden_size}, the expert has "
                             f"{expert.config.hidden_size}: this head was trained for another expert")
        self.embedding = expert.get_input_embeddings().weight.detach()
        self.readout = dense_weight(expert.get_output_embeddings())[self.vocab].clone()
        return self

    @property
    def n_parameters(self) -> int:
        """Trained parameters (fc + the decoder layer), without the attached expert rows."""
        return sum(p.numel() for p in self.parameters())

    def forward(self, features: torch.Tensor, next_tokens: torch.Tensor, cache: DynamicCache | None = None,
                start: int = 0, allowed: torch.Tensor | None = None,
                positions: torch.Tensor | None = None) -> torch.Tensor:
        """Predicted features f̂_{t+1} for inputs (f_t, x_{t+1}) at positions start .. start + T - 1: ``features``
        (B, T, d), or (B, T, k·d) for a fused head (:meth:`read`), ``next_tokens`` (B, T); causal attention over
        the cache (positions < start) and these. ``allowed`` (T, cached + T), True where a query may attend to a
        key, replaces the causal mask (training-time test, :func:`helpers.train_head.head_loss`, where the cache
        holds earlier passes over the same positions; draft trees, :mod:`helpers.trees`, where it is the tree's
        attention mask). ``positions`` (T,) replaces start .. start + T - 1 (a tree's siblings share a position)."""
        if self.embedding is None:
            raise RuntimeError("attach the head to its expert first: head.attach(expert)")
        x = self.fc(torch.cat([torch.nn.functional.embedding(next_tokens, self.embedding), self.read(features)],
                              dim=-1))
        length = x.shape[1]
        if positions is None:
            positions = torch.arange(start, start + length, device=x.device)
        positions = positions[None].expand(x.shape[0], -1)
        if allowed is None:
            allowed = torch.ones(length, start + length, dtype=torch.bool, device=x.device).tril(diagonal=start)
        mask = torch.zeros(allowed.shape, dtype=x.dtype, device=x.device).masked_fill(~allowed,
                                                                                    torch.finfo(x.dtype).min)
        return self.layer(x, attention_mask=mask[None, None], position_ids=positions, past_key_values=cache,
                          use_cache=cache is not None, position_embeddings=self.rotary(x, positions))

    def logits(self, predicted: torch.Tensor) -> torch.Tensor:
        """The head's logits over V_draft (..., N), read out through the expert's LM head rows."""
        return predicted @ self.readout.T

    def save(self, folder: Path) -> None:
        """``head.safetensors`` (fp16 weights + V_draft) and ``head.json`` (the layer shape)."""
        folder.mkdir(parents=True, exist_ok=True)
        tensors = {k: v.detach().half().contiguous() for k, v in self.state_dict().items() if k != "vocab"}
        save_file({**tensors, "vocab": self.vocab.int().contiguous()}, folder / "head.safetensors")
        (folder / "head.json").write_text(json.dumps(self.config.to_dict(), indent=1) + "\n")


def load_head(expert: PreTrainedModel, folder: Path = HEAD_FOLDER) -> DraftHead:
    """The committed draft head for the pocket expert (notebook 07), in the expert's dtype, attached to it."""
    if not (folder / "head.safetensors").exists():
        raise FileNotFoundError(f"no draft head in {folder}: train one with `python -m helpers.train_head`")
    tensors = load_file(folder / "head.safetensors")
    config = LlamaConfig(**json.loads((folder / "head.json").read_text()))
    config._attn_implementation = "sdpa"
    vocab = tensors.pop("vocab").long()
    head = DraftHead(config, vocab)
    head.load_state_dict({**{k: v.to(expert.dtype) for k, v in tensors.items()}, "vocab": vocab})
    return head.to(device=expert.device, dtype=expert.dtype).eval().attach(expert)


class HeadDrafter:
    """The head as a :data:`~helpers.decoding.speculation.Proposer`, with its KV cache kept in step with the
    expert's: before drafting it reads the expert's true features of every position verified since the last
    round (and forgets what it computed from its own predicted features)."""

    def __init__(self, head: DraftHead, expert_cache: CachedModel, *, temperature: float, top_k: int | None,
                 top_p: float | None, generator: torch.Generator | None,
                 confidence_threshold: float | None = None) -> None:
        self.head, self.exp = head, expert_cache
        self.cache = DynamicCache(config=head.config)
        self.true_positions = 0
        """Positions the head's cache holds with the expert's true features (the rest are its own drafts)."""
        self.warp = (temperature, top_k, top_p)
        self.generator = generator
        self.confidence_threshold = confidence_threshold
        self.calls = 0
        self.vocab_size = _vocab_size(expert_cache.model)

    @torch.no_grad()
    def __call__(self, n_draft: int) -> tuple[list[int], list[torch.Tensor]]:
        exp, features = self.exp, self.exp.features
        if features is None or n_draft == 0:
            return [], []  # the first round: the expert has not read the prompt yet, so there is no feature
        drafted = self.cache.get_seq_length() - self.true_positions
        if drafted > 0:
            self.cache.crop(-drafted)
        known = features.shape[0]  # positions 0 .. known - 1 verified; exp.tokens holds one more token
        new_features = features[self.true_positions:known][None]
        new_tokens = exp.tokens[:, self.true_positions + 1:known + 1]
        predicted = self.head(new_features, new_tokens, self.cache, start=self.true_positions)[:, -1:]
        self.calls += 1
        self.true_positions = known
        draft: list[int] = []
        qs: list[torch.Tensor] = []
        temperature = self.warp[0]
        while True:
            logits = self.head.logits(predicted[0, -1])
            q_draft = probabilities(logits, *self.warp)
            index = _pick(q_draft, temperature, self.generator)
            draft.append(int(self.head.vocab[index]))
            qs.append(torch.zeros(self.vocab_size, device=logits.device).index_copy(0, self.head.vocab, q_draft))
            if len(draft) == n_draft or not confident(logits, index, self.confidence_threshold):
                return draft, qs
            token = torch.tensor([[draft[-1]]], device=logits.device)
            predicted = self.head(predicted, token, self.cache, start=known + len(draft) - 1)
            self.calls += 1


def check_attached(head: DraftHead, expert: PreTrainedModel) -> None:
    """Refuse a head that does not share this expert's embedding (it reads the expert's features and tokens)."""
    if head.embedding is None or head.embedding.data_ptr() != expert.get_input_embeddings().weight.data_ptr():
        raise ValueError("the head is not attached to this expert: use load_head(expert) or head.attach(expert)")


def head_speculative(expert: PreTrainedModel, head: DraftHead, input_ids: torch.Tensor, *, max_new_tokens: int,
                     gamma: int = 4, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
                     generator: torch.Generator | None = None, eos_token_id: EosIds = None,
                     confidence_threshold: float | None = None) -> Generation:
    """Speculative decoding with a draft head (notebook 07): Leviathan et al.'s loop
    (:func:`~helpers.decoding.speculation.draft_and_verify`), the head as the drafter. The first round drafts
    nothing (the expert reads the prompt and emits one token); every later round drafts up to γ tokens from the
    features the previous verification pass returned. The output is distributed exactly as sampling from the
    expert (greedy: identical to greedy decoding, in exact arithmetic). ``stats.amateur_calls`` counts head
    forward passes; ``confidence_threshold`` makes the draft length dynamic, as in
    :func:`~helpers.decoding.speculation.speculative`."""
    check_inputs([expert], input_ids, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                 generator=generator, rollback=True)
    _check_pair_args(gamma=gamma)
    check_confidence_threshold(confidence_threshold)
    check_attached(head, expert)
    exp = CachedModel(expert, input_ids, keep_features=True, feature_layers=head.feature_layers)
    drafter = HeadDrafter(head, exp, temperature=temperature, top_k=top_k, top_p=top_p, generator=generator,
                          confidence_threshold=confidence_threshold)
    result = draft_and_verify(exp, drafter, max_new_tokens=max_new_tokens, gamma=gamma, temperature=temperature,
                              top_k=top_k, top_p=top_p, generator=generator, eos=_eos_set(eos_token_id))
    result.stats.amateur_calls = drafter.calls
    return result


class HeadStep:
    """One draft step of a head, timed like :class:`helpers.timing.ForwardStep`: one input position through the
    head and its readout, on a cache that holds the prompt (the cost that c compares with an expert step)."""

    def __init__(self, head: DraftHead, expert: PreTrainedModel, input_ids: torch.Tensor) -> None:
        if input_ids.shape[1] < 2:
            raise ValueError("timing a head step needs a prompt of at least 2 tokens")
        self.head = head
        with torch.no_grad():
            self.features = expert_features(expert(input_ids, output_hidden_states=True).hidden_states,
                                            head.feature_layers)
        self.tokens = input_ids
        self.cache = DynamicCache(config=head.config)
        if input_ids.shape[1] > 2:
            with torch.no_grad():
                head(self.features[:, :-2], self.tokens[:, 1:-1], self.cache)

    @torch.no_grad()
    def __call__(self) -> None:
        length = self.tokens.shape[1]
        predicted = self.head(self.features[:, -2:-1], self.tokens[:, -1:], self.cache, start=length - 2)
        self.head.logits(predicted[0, -1])
        self.cache.crop(-1)
