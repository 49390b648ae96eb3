"""What the speed benchmark compares (:mod:`helpers.bench`): every method, its label and drafter, and one
zero-argument run per configuration.

The methods (:data:`METHODS`), each generating exactly ``max_new_tokens`` tokens with EOS disabled:

* ``naive`` -- our :func:`~helpers.decoding.naive` with a KV cache (the baseline every speedup refers to);
* ``naive_nocache`` -- our naive without a cache, the source article's (unfair) baseline;
* ``hf_greedy`` -- ``expert.generate`` (greedy at temperature 0, else plain sampling);
* ``speculative_gN`` -- our :func:`~helpers.decoding.speculative` with γ = N;
* ``speculative_dynamic_gN`` (not by default) -- the same with a dynamic draft length: at most N tokens, the
  amateur stops after a token it gives less than ``confidence_threshold`` (0.4, transformers' starting value);
* ``hf_assisted_gN`` -- ``expert.generate(assistant_model=amateur)`` drafting exactly γ = N tokens per round
  (:func:`assistant_drafts`);
* ``hf_assisted_default`` (not by default) -- the same under transformers' own default schedule (up to 20
  tokens, a draft ends when the amateur's confidence drops below a threshold that starts at 0.4 and adapts);
* ``self_draft_gN`` (not by default) -- our speculative with an fp16 copy of the expert as the draft
  (:func:`helpers.models.self_draft`), γ = N;
* ``prompt_lookup_gN`` (not by default) -- our :func:`~helpers.decoding.prompt_lookup`, drafts of up to N tokens
  copied from the context;
* ``head_gN`` (not by default) -- :func:`~helpers.heads.head_speculative` with the committed draft head
  (notebook 07), γ = N.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import torch
from transformers import PreTrainedModel
from transformers.utils import logging as hf_logging

from helpers.decoding import Generation, naive, prompt_lookup, speculative
from helpers.decoding.lookup import lookup_draft
from helpers.heads import DraftHead, HeadStep, head_speculative
from helpers.models import Pair
from helpers.timing import ForwardStep

LABELS = {
    "naive": "ours: naive, KV cache",
    "naive_nocache": "ours: naive, no cache (article)",
    "hf_greedy": "HF generate",
    "speculative": "ours: speculative",
    "speculative_dynamic": "ours: speculative, dynamic length",
    "hf_assisted": "HF assisted generation",
    "self_draft": "ours: speculative, fp16 self-draft",
    "prompt_lookup": "ours: prompt lookup",
    "head": "ours: draft head (EAGLE-style)",
    "hf_assisted_default": "HF assisted generation, default schedule",
}
METHODS = tuple(LABELS)
"""Every method the benchmark can time, in the order they run within a round."""
DEFAULT_METHODS = ("naive", "naive_nocache", "hf_greedy", "speculative", "hf_assisted")
DRAFTING = ("speculative", "speculative_dynamic", "hf_assisted", "self_draft", "prompt_lookup", "head")
"""Methods that draft: one configuration per γ."""
OURS_DRAFTING = ("speculative", "speculative_dynamic", "self_draft", "prompt_lookup", "head")
"""Our drafting methods: their Stats give α, the acceptance rate and tokens per expert call."""
CONSTANT_GAMMA = ("speculative", "self_draft", "head")
"""Drafting methods that always draft γ tokens (the head: from its second round on), where α predicts the speed."""
DRAFTER = {"speculative": "amateur", "speculative_dynamic": "amateur", "hf_assisted": "amateur",
           "hf_assisted_default": "amateur", "self_draft": "self_draft", "prompt_lookup": "prompt_lookup",
           "head": "head"}
"""The drafter each method uses, the key of its cost ratio c in ``result["cost"]["c_by_drafter"]``."""
ASSISTANT_SETTINGS = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold",
                      "eos_token_id")
"""The assistant's ``generation_config`` fields :func:`assistant_drafts` sets and restores."""

Config = tuple[str, str, int | None]
"""(name, method, γ) of one configuration, e.g. ``("speculative_g4", "speculative", 4)``."""


def check_methods(methods: Sequence[str] | None) -> list[str]:
    """The methods to time, in :data:`METHODS` order, with ``naive`` (the baseline) always included; ``None`` is
    :data:`DEFAULT_METHODS`. Hyphens may stand for underscores (``prompt-lookup``)."""
    if methods is None:
        return list(DEFAULT_METHODS)
    if isinstance(methods, str):
        raise ValueError(f"methods must be a list of names, got the string {methods!r}; use methods.split(',')")
    chosen = {method.strip().replace("-", "_") for method in methods if method.strip()}
    unknown = sorted(chosen - set(METHODS))
    if unknown:
        raise ValueError(f"unknown method(s) {', '.join(unknown)}: choose from {', '.join(METHODS)}")
    return [method for method in METHODS if method in chosen or method == "naive"]


def configurations(gammas: Sequence[int], methods: Sequence[str]) -> list[Config]:
    """Every configuration, in the order they run within a round: the methods without a draft, then the drafting
    ones γ by γ."""
    configs: list[Config] = [(m, m, None) for m in methods if m not in DRAFTING]
    for gamma in gammas:
        configs += [(f"{m}_g{gamma}", m, gamma) for m in methods if m in DRAFTING]
    return configs


@contextmanager
def quiet_transformers() -> Iterator[None]:
    """Assisted generation logs a deprecation note about its own internal call; keep stdout clean."""
    before = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(before)


@contextmanager
def assistant_drafts(amateur: PreTrainedModel, gamma: int) -> Iterator[None]:
    """Make ``generate(assistant_model=amateur)`` draft exactly γ tokens per round, then restore the config.

    transformers 5 reads these settings from the *assistant's* ``generation_config`` (passing
    ``num_assistant_tokens=γ`` to the expert's ``generate`` has no effect). By default it also ends a draft
    early when the assistant's confidence drops below 0.4 (threshold 0 switches that off) or when the assistant
    drafts its own EOS token, even with ``eos_token_id=None`` for the expert (so the assistant's EOS is unset
    too). Our :func:`~helpers.decoding.speculative` always drafts γ tokens.
    """
    config = amateur.generation_config
    saved = {name: getattr(config, name, None) for name in ASSISTANT_SETTINGS}
    config.num_assistant_tokens = gamma
    config.num_assistant_tokens_schedule = "constant"
    config.assistant_confidence_threshold = 0.0
    config.eos_token_id = None
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(config, name, value)


def hf_kwargs(model: PreTrainedModel, n: int, temperature: float) -> dict:
    """``generate``'s options for exactly ``n`` new tokens, EOS off: greedy at temperature 0, else plain sampling
    (no top-k, no top-p), like our decoders."""
    pad = model.generation_config.pad_token_id
    kwargs = {"max_new_tokens": n, "min_new_tokens": n, "eos_token_id": None,
              "pad_token_id": pad if pad is not None else 0}
    if temperature == 0:
        return {**kwargs, "do_sample": False}
    return {**kwargs, "do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}


def runners(pair: Pair, input_ids: torch.Tensor, configs: Sequence[Config], n: int, temperature: float, seed: int,
            outputs: dict[str, list], self_drafter: PreTrainedModel | None, head: DraftHead | None = None,
            confidence_threshold: float = 0.4) -> dict[str, Callable[[], None]]:
    """One zero-argument function per configuration; each appends its output (a Generation, or HF's new token
    ids) to ``outputs[name]``."""
    expert, amateur, device = pair.expert, pair.amateur, input_ids.device
    mask = torch.ones_like(input_ids)
    hf = hf_kwargs(expert, n, temperature)

    def generator() -> torch.Generator | None:
        return torch.Generator(device).manual_seed(seed) if temperature > 0 else None

    common = {"max_new_tokens": n, "temperature": temperature, "eos_token_id": None}
    ours: dict[str, Callable[[int | None], Generation]] = {
        "naive": lambda _: naive(expert, input_ids, generator=generator(), **common),
        "naive_nocache": lambda _: naive(expert, input_ids, use_cache=False, generator=generator(), **common),
        "speculative": lambda g: speculative(expert, amateur, input_ids, gamma=g, generator=generator(), **common),
        "speculative_dynamic": lambda g: speculative(expert, amateur, input_ids, gamma=g, generator=generator(),
                                                     confidence_threshold=confidence_threshold, **common),
        "self_draft": lambda g: speculative(expert, self_drafter, input_ids, gamma=g, generator=generator(),
                                            **common),
        "prompt_lookup": lambda g: prompt_lookup(expert, input_ids, gamma=g, generator=generator(), **common),
        "head": lambda g: head_speculative(expert, head, input_ids, gamma=g, generator=generator(), **common),
    }

    def mine(name: str, method: str, gamma: int | None) -> Callable[[], None]:
        def run() -> None:
            outputs[name].append(ours[method](gamma))
        return run

    def theirs(name: str, gamma: int | None) -> Callable[[], None]:
        def run() -> None:
            torch.manual_seed(seed)
            if name == "hf_greedy":
                out = expert.generate(input_ids, attention_mask=mask, **hf)
            elif name == "hf_assisted_default":  # transformers' own schedule, as a user gets it
                out = expert.generate(input_ids, attention_mask=mask, assistant_model=amateur, **hf)
            else:
                with assistant_drafts(amateur, gamma):
                    out = expert.generate(input_ids, attention_mask=mask, assistant_model=amateur, **hf)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            outputs[name].append(out[0, input_ids.shape[1]:].tolist())
        return run

    return {name: mine(name, method, gamma) if method in ours else theirs(name, gamma)
            for name, method, gamma in configs}


def drafter_steps(pair: Pair, input_ids: torch.Tensor, methods: Sequence[str],
                  self_drafter: PreTrainedModel | None, head: DraftHead | None) -> dict[str, Callable[[], object]]:
    """One draft step of every drafter the methods use (the amateur always), to time for its cost ratio c."""
    steps: dict[str, Callable[[], object]] = {"amateur": ForwardStep(pair.amateur, input_ids, 1)}
    if self_drafter is not None:
        steps["self_draft"] = ForwardStep(self_drafter, input_ids, 1)
    if head is not None:
        steps["head"] = HeadStep(head, pair.expert, input_ids)
    if "prompt_lookup" in methods:
        context = input_ids[0].tolist()
        steps["prompt_lookup"] = lambda: lookup_draft(context, 1)
    return steps


def new_tokens(output: Generation | list[int]) -> list[int]:
    """The new token ids of a run's output, ours (a Generation) or transformers' (a list)."""
    return output.new_token_ids if isinstance(output, Generation) else output
