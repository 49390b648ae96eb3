"""Speed benchmark: our decoders against transformers' ``generate``, interleaved in one process.

``python -m helpers.bench [--quick] [--pair pocket] [--gammas 1,2,4] [--methods ...] [--out output/bench.json]``
(notebook 04 calls :func:`run_benchmark` and :func:`markdown_table` directly).

For every prompt, round after round (:func:`helpers.timing.interleaved`), each configuration generates exactly
``max_new_tokens`` tokens (EOS disabled):

* ``naive`` -- our :func:`~helpers.decoding.naive` with a KV cache (the baseline every speedup refers to);
* ``naive_nocache`` -- our naive without a cache, the source article's (unfair) baseline;
* ``hf_greedy`` -- ``expert.generate`` (greedy at temperature 0, else plain sampling);
* ``speculative_gN`` -- our :func:`~helpers.decoding.speculative` with γ = N;
* ``speculative_dynamic_gN`` (not by default) -- the same with a dynamic draft length: at most N tokens, the
  amateur stops after a token it gives less than ``confidence_threshold`` (0.4, transformers' starting value);
* ``hf_assisted_gN`` -- ``expert.generate(assistant_model=amateur)`` drafting exactly γ = N tokens per round;
* ``hf_assisted_default`` (not by default) -- the same under transformers' own default schedule (up to 20
  tokens, a draft ends when the amateur's confidence drops below a threshold that starts at 0.4 and adapts);
* ``self_draft_gN`` (not by default) -- our speculative with an fp16 copy of the expert as the draft
  (:func:`helpers.models.self_draft`), γ = N;
* ``prompt_lookup_gN`` (not by default) -- our :func:`~helpers.decoding.prompt_lookup`, drafts of up to N tokens
  copied from the context;
* ``head_gN`` (not by default) -- :func:`~helpers.heads.head_speculative` with the committed draft head
  (notebook 07), γ = N.

``--methods`` (``methods=``) chooses among them (:data:`METHODS`); ``naive``, the baseline, always runs.

Every configuration first runs once, untimed, with a few tokens (warm-up). At temperature 0 (the default) all
of them produce the same text, so only the time differs. The result also holds each drafter's cost ratio c and
the verification costs r(d) (:func:`helpers.timing.drafter_costs`), α, and two speedups next to the measured one:
E[tokens] / (γ·c + r(γ)) from α (constant γ), and n / Σ_rounds (d·c + r(d)) from the counted draft lengths
(:func:`helpers.timing.speedup_from_counts`, every drafter of ours).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import shlex
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

import torch
import transformers
from tqdm.auto import tqdm
from transformers import PreTrainedModel
from transformers.utils import logging as hf_logging

from helpers.compare import median_interval
from helpers.data import ARTICLE_PROMPTS, grounded_tasks, read_prompts
from helpers.decoding import Generation, naive, prompt_lookup, speculative
from helpers.decoding.lookup import lookup_draft
from helpers.heads import DraftHead, HeadStep, head_speculative, load_head
from helpers.machine import cpu_name, describe_cpu
from helpers.models import Pair, load_pair, self_draft
from helpers.protocol import MIN_PROMPTS
from helpers.timing import (
    ForwardStep,
    drafter_costs,
    expected_tokens,
    interleaved,
    load_warning,
    median,
    predicted_speedup,
    speedup_from_counts,
    summarize,
)

REPO = Path(__file__).resolve().parent.parent
DEFAULT_PROMPTS = ARTICLE_PROMPTS
DEFAULT_OUT = REPO / "output" / "bench.json"
DEFAULTS = {"gammas": "1,2,3,4,5,6,7,8,9,10", "repeats": 3, "max_new_tokens": 48}
QUICK = {"gammas": "1,4", "prompts": 2, "repeats": 1, "max_new_tokens": 24}
"""``--quick``: what it changes (an option given explicitly still wins)."""
COST_ROUNDS_PER_REPEAT = 5
"""Single forward passes are short: c and r are measured over 5 × repeats interleaved rounds."""

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

Prompt = str | torch.Tensor
"""A prompt as text (encoded with the pair's tokenizer) or already encoded as a (1, T) LongTensor."""


# ------------------------------------------------------------------------------------------ helpers
def machine_info(device: torch.device | str) -> dict:
    """Library versions, threads, CPU model and device, for the JSON."""
    device = torch.device(device)
    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "cpu": cpu_name(),
        "cpu_kind": describe_cpu(),
        "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
    }


def _load_average() -> list[float] | None:
    """1, 5 and 15 minute load averages: well above the benchmark's own thread count, other processes shared
    the CPU."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@contextmanager
def quiet_transformers() -> Iterator[None]:
    """Assisted generation logs a deprecation note about its own internal call; keep stdout clean."""
    before = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(before)


ASSISTANT_SETTINGS = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold",
                      "eos_token_id")


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


def _hf_kwargs(model: PreTrainedModel, n: int, temperature: float) -> dict:
    pad = model.generation_config.pad_token_id
    kwargs = {"max_new_tokens": n, "min_new_tokens": n, "eos_token_id": None,
              "pad_token_id": pad if pad is not None else 0}
    if temperature == 0:
        return {**kwargs, "do_sample": False}
    return {**kwargs, "do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}


def _pooled_stats(generations: Sequence[Generation]) -> dict[str, float]:
    """α (mean β over every judged draft position), the share of drafted tokens kept (accepted / drafted: lower
    than α, as the rest of a draft after a rejection is never judged) and tokens per expert call, pooled."""
    betas = [b for g in generations for b in g.stats.betas]
    proposed = sum(g.stats.proposed for g in generations)
    calls = sum(g.stats.expert_calls for g in generations)
    return {
        "alpha": sum(betas) / len(betas) if betas else math.nan,
        "n_positions": len(betas),
        "share_kept": sum(g.stats.accepted for g in generations) / proposed if proposed else math.nan,
        "tokens_per_expert_call": sum(len(g.new_token_ids) for g in generations) / calls if calls else math.nan,
    }


def warmup_tokens(gammas: Sequence[int], max_new_tokens: int) -> int:
    """Tokens of the untimed warm-up run of every configuration (first prompt): enough for one full draft of
    the largest γ, but far fewer than a timed run (a full warm-up round would cost a third of ``--quick``)."""
    return min(max_new_tokens, max(gammas) + 2)


def _json_safe(value: object) -> object:
    """NaN and ±inf become null (strict JSON); tuples become lists."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


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


def _configurations(gammas: Sequence[int], methods: Sequence[str]) -> list[tuple[str, str, int | None]]:
    """(name, method, γ) of every configuration, in the order they run within a round: the methods without a
    draft, then the drafting ones γ by γ."""
    configs: list[tuple[str, str, int | None]] = [(m, m, None) for m in methods if m not in DRAFTING]
    for gamma in gammas:
        configs += [(f"{m}_g{gamma}", m, gamma) for m in methods if m in DRAFTING]
    return configs


# ------------------------------------------------------------------------------------------ benchmark
def _runners(pair: Pair, input_ids: torch.Tensor, configs: Sequence[tuple[str, str, int | None]], n: int,
             temperature: float, seed: int, outputs: dict[str, list],
             self_drafter: PreTrainedModel | None, head: DraftHead | None = None,
             confidence_threshold: float = 0.4) -> dict[str, Callable[[], object]]:
    """One zero-argument function per configuration; each appends its output to ``outputs[name]``."""
    expert, amateur, device = pair.expert, pair.amateur, input_ids.device
    mask = torch.ones_like(input_ids)
    hf = _hf_kwargs(expert, n, temperature)

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
            _sync(device)
            outputs[name].append(out[0, input_ids.shape[1]:].tolist())
        return run

    return {name: mine(name, method, gamma) if method in ours else theirs(name, gamma)
            for name, method, gamma in configs}


def _drafter_steps(pair: Pair, input_ids: torch.Tensor, methods: Sequence[str],
                   self_drafter: PreTrainedModel | None, head: DraftHead | None) -> dict[str, Callable[[], object]]:
    """One draft step of every drafter the methods use (the amateur always: ``c`` of the result), to time for c."""
    steps: dict[str, Callable[[], object]] = {"amateur": ForwardStep(pair.amateur, input_ids, 1)}
    if self_drafter is not None:
        steps["self_draft"] = ForwardStep(self_drafter, input_ids, 1)
    if head is not None:
        steps["head"] = HeadStep(head, pair.expert, input_ids)
    if "prompt_lookup" in methods:
        context = input_ids[0].tolist()
        steps["prompt_lookup"] = lambda: lookup_draft(context, 1)
    return steps


def _tokens(output: Generation | list[int]) -> list[int]:
    return output.new_token_ids if isinstance(output, Generation) else output


def run_benchmark(pair: Pair, prompts: Sequence[Prompt], gammas: Sequence[int], repeats: int = 3,
                  max_new_tokens: int = 48, temperature: float = 0.0, seed: int = 0,
                  progress: bool = True, methods: Sequence[str] | None = None,
                  confidence_threshold: float = 0.4, head: DraftHead | None = None) -> dict:
    """Time every configuration on every prompt (interleaved) and return a JSON-ready dict.

    Prompts are text (encoded with ``pair.encode``) or (1, T) LongTensors. Per-token time = run time / N.
    Ratios and speedups are computed per round from the interleaved runs, then the median is taken.
    ``methods``: names from :data:`METHODS` (default :data:`DEFAULT_METHODS`; naive always runs).
    ``confidence_threshold``: the dynamic draft length of ``speculative_dynamic``. ``head``: the draft head of
    method ``head`` (default: the committed one, :func:`helpers.heads.load_head`).
    """
    gammas = list(gammas)
    methods = check_methods(methods)
    if not prompts:
        raise ValueError("give at least one prompt")
    if not gammas or any(isinstance(g, bool) or not isinstance(g, int) or g < 1 for g in gammas):
        raise ValueError(f"gammas must be ints >= 1, got {gammas!r}")
    if repeats < 1 or max_new_tokens < 1 or not temperature >= 0:
        raise ValueError(f"need repeats >= 1, max_new_tokens >= 1 and temperature >= 0, got "
                         f"{repeats}, {max_new_tokens}, {temperature}")
    started = time.perf_counter()
    load_before = _load_average()
    busy = load_warning()
    if busy:
        warnings.warn(busy, RuntimeWarning, stacklevel=2)
    n = max_new_tokens
    encoded = [p if isinstance(p, torch.Tensor) else pair.encode(p) for p in prompts]
    configs = _configurations(gammas, methods)
    names = [name for name, _, _ in configs]
    self_drafter = self_draft(pair.expert) if "self_draft" in methods else None
    if "head" in methods and head is None:
        head = load_head(pair.expert)
    compare_spec = {"speculative", "hf_assisted"} <= set(methods)
    per_token: dict[str, list[float]] = {name: [] for name in names}
    speedups: dict[str, list[list[float]]] = {name: [] for name in names}  # per prompt: one ratio per round
    same_text: dict[str, list[bool]] = {name: [] for name in names}
    lengths: dict[str, set[int]] = {name: set() for name in names}
    drafted: dict[str, list[Generation]] = {name: [] for name, method, _ in configs if method in OURS_DRAFTING}
    naive_over_hf: list[float] = []
    spec_over_hf: dict[int, list[float]] = {gamma: [] for gamma in gammas} if compare_spec else {}

    total = (1 + repeats * len(encoded)) * len(names) + len(encoded)
    bar = tqdm(total=total, desc="bench", unit="run", disable=not progress)
    with quiet_transformers():
        bar.set_postfix_str("warm-up")
        warm = _runners(pair, encoded[0], configs, warmup_tokens(gammas, n), temperature, seed,
                        {name: [] for name in names}, self_drafter, head, confidence_threshold)
        interleaved(warm, repeats=1, warmup=0, on_run=lambda _name: bar.update())
        bar.set_postfix_str("cost ratios")
        c_by, r_by_length = drafter_costs(pair.expert, encoded[0],
                                          _drafter_steps(pair, encoded[0], methods, self_drafter, head),
                                          range(1, max(gammas) + 1), COST_ROUNDS_PER_REPEAT * repeats)
        c, r = c_by["amateur"], {gamma: r_by_length[gamma] for gamma in gammas}
        for index, input_ids in enumerate(encoded):
            bar.set_postfix_str(f"prompt {index + 1}/{len(encoded)}")
            outputs: dict[str, list] = {name: [] for name in names}
            fns = _runners(pair, input_ids, configs, n, temperature, seed, outputs, self_drafter, head,
                           confidence_threshold)
            times = interleaved(fns, repeats, warmup=0, on_run=lambda _name: bar.update())
            for name in names:
                speedups[name].append([])
            for round_ in range(repeats):
                reference = _tokens(outputs["naive"][round_])
                for name in names:
                    tokens = _tokens(outputs[name][round_])
                    per_token[name].append(times[name][round_] / n)
                    speedups[name][-1].append(times["naive"][round_] / times[name][round_])
                    same_text[name].append(tokens == reference)
                    lengths[name].add(len(tokens))
                if "hf_greedy" in times:
                    naive_over_hf.append(times["naive"][round_] / times["hf_greedy"][round_])
                for gamma in spec_over_hf:
                    spec_over_hf[gamma].append(times[f"speculative_g{gamma}"][round_]
                                               / times[f"hf_assisted_g{gamma}"][round_])
            for name in drafted:
                drafted[name] += outputs[name]
        # α at temperature 1: one sampled speculative run per prompt (at T=0 β is only 0/1 agreement).
        bar.set_postfix_str("alpha at T=1")
        t1_gamma = max(gammas)
        t1_runs = []
        for index, input_ids in enumerate(encoded):
            t1_runs.append(speculative(pair.expert, pair.amateur, input_ids, max_new_tokens=n, gamma=t1_gamma,
                                       temperature=1.0, eos_token_id=None,
                                       generator=torch.Generator(input_ids.device).manual_seed(seed + index)))
            bar.update()
    bar.close()
    t1 = _pooled_stats(t1_runs)
    alpha_t1 = t1["alpha"]

    configurations = []
    for name, method, gamma in configs:
        row: dict = {"name": name, "method": method, "label": LABELS[method], "gamma": gamma,
                     "per_token_s": asdict(summarize(per_token[name])),
                     "new_tokens": sorted(lengths[name]),
                     "same_text_as_naive": sum(same_text[name]) / len(same_text[name]),
                     "speedup_vs_naive": median([x for per_prompt in speedups[name] for x in per_prompt]),
                     "speedup_interval": (median_interval(speedups[name]) if len(speedups[name]) >= MIN_PROMPTS
                                          else None)}
        if method in DRAFTER:
            row["c"] = c_by[DRAFTER[method]]
        if method in OURS_DRAFTING:
            row.update(_pooled_stats(drafted[name]))
            row["r"] = r[gamma]
            lengths_drafted = [len(it.draft) for g in drafted[name] for it in g.trace]
            row["explained_from_counts"] = speedup_from_counts(
                lengths_drafted, sum(len(g.new_token_ids) for g in drafted[name]), row["c"], r_by_length)
        if method in CONSTANT_GAMMA:
            alpha = row["alpha"]
            row.update({
                "expected_tokens_per_call": expected_tokens(alpha, gamma) if not math.isnan(alpha) else math.nan,
                "predicted_speedup": (predicted_speedup(alpha, gamma, row["c"], r[gamma])
                                      if not math.isnan(alpha) else math.nan),
            })
        if method == "speculative":
            row["predicted_speedup_t1"] = (predicted_speedup(alpha_t1, gamma, c, r[gamma])
                                           if not math.isnan(alpha_t1) else math.nan)
        configurations.append(row)

    return {
        "machine": {**machine_info(encoded[0].device), "load_average_before": load_before,
                    "load_average_after": _load_average()},
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": None,
        "settings": {
            "pair": pair.name, "expert": pair.expert_name, "amateur": pair.amateur_name,
            "prompts": [p if isinstance(p, str) else p[0].tolist() for p in prompts],
            "gammas": gammas, "methods": methods, "repeats": repeats, "warmup_tokens": warmup_tokens(gammas, n),
            "max_new_tokens": n, "temperature": temperature, "seed": seed,
            "confidence_threshold": confidence_threshold,
            "hf_assistant": {"num_assistant_tokens": "gamma", "num_assistant_tokens_schedule": "constant",
                             "assistant_confidence_threshold": 0.0, "assistant_eos_token_id": None},
        },
        "cost": {"c": c, "r": r, "c_by_drafter": c_by, "r_by_draft_length": r_by_length,
                 "rounds": COST_ROUNDS_PER_REPEAT * repeats,
                 "note": "c = drafter's 1-token step / expert 1-token step (c is the amateur's; c_by_drafter "
                         "every drafter's; prompt_lookup: one n-gram lookup); r(γ) = expert forward over γ+1 "
                         "tokens / expert 1-token step (KV-cached, interleaved, median of per-round ratios); "
                         "r_by_draft_length: r(d) for every d up to max γ, r(0) = 1"},
        "alpha_t1": {"alpha": alpha_t1, "gamma": t1_gamma, "n_positions": t1["n_positions"],
                     "note": "mean β of one temperature-1 speculative run per prompt; the timed runs' α is "
                             "at the timed temperature (at T=0: greedy 0/1 agreement)"},
        "alpha_source": ("mean β of the timed runs at temperature "
                         f"{temperature:g}" + (" = accepted / judged draft positions" if temperature == 0 else "")),
        "configurations": configurations,
        "ratios": {
            "ours_naive_over_hf_greedy": median(naive_over_hf) if naive_over_hf else None,
            "ours_speculative_over_hf_assisted": {gamma: median(v) for gamma, v in spec_over_hf.items()},
            "note": "time ratios per interleaved round, then median; < 1 means ours is faster",
        },
        "wall_s": time.perf_counter() - started,
    }


# ---------------------------------------------------------------------------------------------- output
def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "–" if value is None or (isinstance(value, float) and not math.isfinite(value)) else format(value, spec)


def _interval(row: dict, prompts: int) -> str:
    """`` [low, high]``, or nothing below :data:`~helpers.protocol.MIN_PROMPTS` prompts (files written before that
    rule hold intervals from fewer prompts: they are not shown)."""
    interval = row.get("speedup_interval")
    return f" [{interval[0]:.2f}, {interval[1]:.2f}]" if interval and prompts >= MIN_PROMPTS else ""


def markdown_table(result: dict) -> str:
    """The result as a Markdown table plus a few lines with c, r, α at T=1 and the ours/HF ratios. Results with
    every drafter's c (``cost.c_by_drafter``) get the columns c, r and "from counts"
    (:func:`helpers.timing.speedup_from_counts`)."""
    per_drafter = "c_by_drafter" in result["cost"]
    prompts = len(result["settings"]["prompts"])
    extra_head, extra_rule = (" c | r | from counts |", "---:|---:|---:|") if per_drafter else ("", "")
    ci = " [95 % CI]" if prompts >= MIN_PROMPTS else f" (no interval from {prompts} prompts)"
    lines = [f"| configuration | γ | ms/token median | min–max | speedup vs naive{ci} | explained | α | "
             f"drafts kept | tokens/expert call |{extra_head} same text |",
             f"|---|---:|---:|---:|---:|---:|---:|---:|---:|{extra_rule}---:|"]
    for row in result["configurations"]:
        t = row["per_token_s"]
        extra = ""
        if per_drafter:
            counts = row.get("explained_from_counts")
            extra = (f" {_fmt(row.get('c'), '.3f')} | {_fmt(row.get('r'))} | "
                     f"{_fmt(counts)}{'×' if counts is not None else ''} |")
        lines.append(
            f"| {row['label']} | {row['gamma'] or ''} | {t['median'] * 1e3:.1f} | "
            f"{t['min'] * 1e3:.1f}–{t['max'] * 1e3:.1f} | {_fmt(row['speedup_vs_naive'])}×{_interval(row, prompts)} | "
            f"{_fmt(row.get('predicted_speedup'))}{'×' if 'predicted_speedup' in row else ''} | "
            f"{_fmt(row.get('alpha'))} | {_fmt(row.get('share_kept', row.get('acceptance_rate')))} | "
            f"{_fmt(row.get('tokens_per_expert_call'))} |{extra} "
            f"{row['same_text_as_naive']:.0%} |")
    cost, settings, ratios = result["cost"], result["settings"], result["ratios"]
    r = ", ".join(f"r({g})={_fmt(v)}" for g, v in cost["r"].items())
    spec_hf = ", ".join(f"γ={g}: {_fmt(v)}" for g, v in ratios["ours_speculative_over_hf_assisted"].items()) or "–"
    t1 = result["alpha_t1"]
    machine = result["machine"]
    lines += [
        "",
        f"- cost ratios of the pair's amateur ({settings['amateur']}): c={_fmt(cost['c'], '.3f')}, {r}; "
        f"explained = E[tokens]/(γ·c + r(γ)) with α = {result['alpha_source']} (the same run's α: an "
        "explanation of the measurement, not a prediction from held-out data)",
        *(["- every drafter's c: " + ", ".join(f"{k} {_fmt(v, '.3f')}" for k, v in cost["c_by_drafter"].items())
           + "; from counts = N / Σ (d·c + r(d)) over its speculative rounds, N the tokens generated, d each round's "
             "counted draft length, r(0) = 1"]
          if per_drafter else []),
        f"- α of the pair's amateur at temperature 1 (one sampled speculative run per prompt, γ={t1['gamma']}): "
        f"{_fmt(t1['alpha'], '.3f')}",
        f"- time ours/HF: naive/greedy {_fmt(ratios['ours_naive_over_hf_greedy'])}; "
        f"speculative/assisted {spec_hf} (< 1: ours faster)",
        f"- {settings['pair']} ({settings['expert']} + {settings['amateur']}), {settings['max_new_tokens']} "
        f"tokens, {len(settings['prompts'])} prompts × {settings['repeats']} timing rounds, temperature "
        f"{settings['temperature']:g}; {machine['device']}, threads={machine['threads']}, CPU: {machine['cpu']}",
    ]
    loads = machine.get("load_average_before"), machine.get("load_average_after")
    if all(loads):
        busy = max(loads[0][0], loads[1][0]) > machine["threads"] + 1  # the benchmark's own threads count too
        lines.append(f"- load average (1 min) before/after: {loads[0][0]:.2f}/{loads[1][0]:.2f} on "
                     f"{machine['cpu_count']} cores" + (": other processes shared the CPU, the timings are not clean"
                                                        if busy else ""))
    return "\n".join(lines)


def write_json(result: dict, path: Path | str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_json_safe(result), indent=2, ensure_ascii=False, allow_nan=False) + "\n")
    return path


# ------------------------------------------------------------------------------------------------- CLI
def _gammas(text: str) -> list[int]:
    try:
        gammas = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a comma list of ints like 1,2,4, got {text!r}") from None
    if not gammas or min(gammas) < 1:
        raise argparse.ArgumentTypeError(f"gammas must be ints >= 1, got {text!r}")
    return gammas


def _methods(text: str) -> list[str]:
    try:
        return check_methods(text.split(","))
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m helpers.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pair", default="pocket", help="model pair for helpers.models.load_pair (default pocket)")
    parser.add_argument("--amateur", default=None,
                        help="replace the pair's amateur (load_pair's amateur=...): distilled, early-exit, "
                             "early-exit-K, self-fp16, self-bf16, a hub id or a folder")
    parser.add_argument("--gammas", type=_gammas, default=None,
                        help=f"draft lengths, comma list (default {DEFAULTS['gammas']}; --quick: {QUICK['gammas']})")
    parser.add_argument("--methods", type=_methods, default=None,
                        help=f"methods to time, a comma list (e.g. prompt-lookup,self-draft; hyphens or "
                             f"underscores) from: {', '.join(METHODS)}. Default: {', '.join(DEFAULT_METHODS)}. "
                             "naive, the baseline, always runs; the drafting methods run once per γ")
    parser.add_argument("--prompts", type=Path, nargs="+", default=[DEFAULT_PROMPTS],
                        help="text file(s), one prompt per line, read in order (default data/article_prompts.txt "
                             "in the repository; notebook 07: data/article_prompts.txt data/prompts.txt)")
    parser.add_argument("--grounded", action="store_true",
                        help="instead of --prompts: notebook 06's input-grounded tasks (summarise, quote, edit the "
                             "passage in data/passage.txt) as chat turns, where prompt lookup drafts well")
    parser.add_argument("--repeats", type=int, default=None,
                        help=f"timed rounds per prompt (default {DEFAULTS['repeats']}; --quick: {QUICK['repeats']})")
    parser.add_argument("--max-new-tokens", type=int, default=None,
                        help=f"tokens per run (default {DEFAULTS['max_new_tokens']}; --quick: "
                             f"{QUICK['max_new_tokens']})")
    parser.add_argument("--temperature", type=float, default=0.0,
                        help="0 = greedy (default): every method produces the same text")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON file (default output/bench.json)")
    parser.add_argument("--quick", action="store_true",
                        help=f"gammas {QUICK['gammas']}, {QUICK['prompts']} prompts, repeats {QUICK['repeats']}, "
                             f"{QUICK['max_new_tokens']} tokens (explicit options still win)")
    parser.add_argument("--n-prompts", type=int, default=None,
                        help=f"use only the first N prompts of the file (default all; --quick: {QUICK['prompts']})")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--confidence", type=float, default=0.4,
                        help="speculative_dynamic: stop a draft after a token the amateur gives less (default 0.4)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    preset = QUICK if args.quick else DEFAULTS
    if args.gammas is None:
        args.gammas = _gammas(preset["gammas"])
    if args.repeats is None:
        args.repeats = preset["repeats"]
    if args.max_new_tokens is None:
        args.max_new_tokens = preset["max_new_tokens"]
    if args.n_prompts is None and args.quick:
        args.n_prompts = QUICK["prompts"]
    return args


def main(argv: Sequence[str] | None = None) -> dict:
    """Parse the options, load the pair, run the benchmark, write the JSON and print the table."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.grounded:
        texts = list(grounded_tasks().values())
    else:
        texts = [prompt for path in args.prompts for prompt in read_prompts(path)]
    if args.n_prompts is not None and not 1 <= args.n_prompts <= len(texts):
        raise SystemExit(f"--n-prompts {args.n_prompts}: there are {len(texts)} prompts, use 1..{len(texts)}")
    pair = load_pair(args.pair, amateur=args.amateur)
    encode = pair.encode_chat if args.grounded else (lambda text: text)
    prompts: list[Prompt] = [encode(text) for text in texts[:args.n_prompts]]
    result = run_benchmark(pair, prompts, args.gammas, repeats=args.repeats, max_new_tokens=args.max_new_tokens,
                           temperature=args.temperature, seed=args.seed, progress=not args.no_progress,
                           methods=args.methods, confidence_threshold=args.confidence)
    result["command"] = shlex.join(["python", "-m", "helpers.bench", *argv])
    path = write_json(result, args.out)
    print(markdown_table(result))
    print(f"\nwritten to {path} ({result['wall_s']:.0f} s)")
    return result


if __name__ == "__main__":
    main()
