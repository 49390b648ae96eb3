"""Contrast inside one model (notebook 06): contrastive search, Su et al. 2022 (a degeneration penalty on hidden
states), and DoLa, Chuang et al. 2023 (the final layer contrasted with an early exit of the same model)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from helpers.decoding.baseline import _check_penalty, penalize_repetition
from helpers.decoding.contrast import contrastive_scores
from helpers.decoding.core import (
    CachedModel,
    EosIds,
    Generation,
    Stats,
    _check_pair_args,
    _eos_set,
    _is_int,
    _is_number,
    check_inputs,
)


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
