"""How fast the drafters of notebooks 03-07 make the pocket expert on this CPU, measured with the tutorial's protocol
(:mod:`helpers.protocol`) on the held-out evaluation prompts (``data/eval_prompts.txt``, chat template, EOS on).

``python -m helpers.speed --out data/results/speed-<cpu>.json [--runs 2] [--kernels eager] [--dtype fp32]`` writes one
file per CPU and execution path of the models (:mod:`helpers.kernels`; ``--dtype bf16``: bf16 weights, a different
expert, where the CPU has bf16 instructions) with its command, settings, machine and every raw number,
in three phases (``--show`` prints an existing file's table and README row; ``--add-run`` appends one more
evaluation run to an existing file, on a machine of the same CPU kind; ``--quick`` runs every phase on two prompts
with a few tokens):

1. **costs** (:func:`context_costs`): on the first ``--cost-prompts`` evaluation prompts, each extended by 0, 32 and
   64 tokens, the seconds of an expert pass over n = 1..16 new tokens, of a step of the distilled draft and of a
   step of the draft head (notebook 07), interleaved; c = draft step / expert step, r(n - 1) = n-token pass /
   expert step;
2. **selection** (:func:`select`): on the selection split (the odd lines), every drafter at γ = 1..6 and at a
   dynamic length (up to 6, stopping below confidence 0.4), greedy and at temperature 1; each drafter's fastest
   γ per temperature, by time per token relative to naive decoding;
3. **evaluation** (``--runs`` separate processes): on the evaluation split (the even lines, never used to choose),
   naive decoding and both drafters at their selected γ, greedy and at temperature 1; on any other path than fp32
   eager also greedy naive decoding with the fp32 eager expert (:data:`REFERENCE`) in the same shuffled timing
   rounds, so that a path's speedup over the tutorial's expert is measured, not pieced together from runs at other times
   (this VM's speed drifts between sessions by more than the paths differ).

:func:`summary` turns the file into what README and notebooks print: per drafter and temperature the speedup of
every run, pooled, and their spread; α, α by depth, the share kept, tokens per expert call; the speedup that the
cost model explains from the counted draft lengths, c and r (:func:`helpers.timing.speedup_from_counts`), and
with free verification (r = 1, ``explained_free``); the mean draft length of the rounds that drafted; and the
model gap, measured / explained. The explained speedup counts bare forward passes after the prompt; the measured
one includes the prompt's prefill (common to both, pulling the ratio towards 1) and everything around the passes
(naive decoding pays its Python and sampling work once per token, a drafting round once per round, plus the
head's catch-up pass and the bookkeeping). Near 1, the passes account for the measured speed; the gap is the
measured share of everything else. Runs since rounds were timed also keep every round's seconds (and naive
decoding's every step's): :func:`round_costs` divides a whole drafting round by naive decoding's step in the same
timing round, beside the cost model's d·c + r(d) from phase 1's single steps (:func:`round_cost_table`).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from helpers import ablation
from helpers.compare import Interval, mean_of
from helpers.data import EVAL_PROMPTS, read_prompts
from helpers.decoding import naive, speculative
from helpers.heads import DraftHead, HeadStep, head_speculative, load_head
from helpers.kernels import KERNELS, with_kernels
from helpers.machine import fast_bf16, machine_info
from helpers.models import Pair, load_pair
from helpers.protocol import (
    MIN_PROMPTS,
    Decoder,
    across_runs,
    add_file_arguments,
    append_run,
    commands,
    depth_acceptance,
    file_command,
    mean_speedup,
    seconds_per_token,
    start_runs,
    timed_runs,
)
from helpers.timing import ForwardStep, interleaved, speedup_from_counts

DRAFTERS = ("draft", "head")
"""The distilled draft of notebook 05 (the pocket pair's amateur) and the draft head of notebook 07."""
GAMMAS = (1, 2, 3, 4, 5, 6, "dynamic")
"""The draft lengths the selection tries; "dynamic": up to :data:`DYNAMIC_MAX` tokens, the drafter stops after a
token it gives less than :data:`CONFIDENCE` (transformers' starting value)."""
DYNAMIC_MAX, CONFIDENCE = 6, 0.4
TEMPERATURES = (0.0, 1.0)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
"""The models' weights: fp32 (the tutorial's expert) or bf16 (a different expert, :mod:`helpers.kernels`)."""
REFERENCE = "naive T=0 fp32 eager"
"""The configuration name of greedy naive decoding with the fp32 eager expert, timed beside another path's."""
CONTEXT_EXTRA = (0, 32, 64)
MAX_TOKENS_PER_PASS = 16
DEFAULTS = {"cost_prompts": 10, "cost_repeats": 3, "select_prompts": 10, "select_tokens": 32, "eval_prompts": 20,
            "rounds": 3, "max_new_tokens": 48}
QUICK = {"cost_prompts": 2, "cost_repeats": 1, "select_prompts": 2, "select_tokens": 8, "eval_prompts": 2,
         "rounds": 1, "max_new_tokens": 8}
"""``--quick``: every phase on two prompts with a few tokens (a smoke test of the protocol, no intervals)."""


def config_name(drafter: str, gamma: int | str, temperature: float) -> str:
    """``"naive T=0"``, ``"draft γ=3 T=1"``, ``"head γ=dynamic T=0"``."""
    return f"naive T={temperature:g}" if drafter == "naive" else f"{drafter} γ={gamma} T={temperature:g}"


def decoder(pair: Pair, head: DraftHead, drafter: str, gamma: int | str, temperature: float,
            max_new_tokens: int) -> Decoder:
    """One configuration of the protocol: naive decoding, or a drafter at draft length γ, at one temperature."""
    common = {"max_new_tokens": max_new_tokens, "temperature": temperature, "eos_token_id": pair.eos_token_id}
    draft = {"gamma": DYNAMIC_MAX, "confidence_threshold": CONFIDENCE} if gamma == "dynamic" else {"gamma": gamma}

    def decode(ids: torch.Tensor, seed: int):
        generator = torch.Generator(device=ids.device).manual_seed(seed) if temperature > 0 else None
        if drafter == "naive":
            return naive(pair.expert, ids, generator=generator, **common)
        if drafter == "draft":
            return speculative(pair.expert, pair.amateur, ids, generator=generator, **draft, **common)
        if drafter == "head":
            return head_speculative(pair.expert, head, ids, generator=generator, **draft, **common)
        raise ValueError(f"unknown drafter {drafter!r}: choose 'naive' or one of {DRAFTERS}")
    return decode


def split(prompts: Sequence[str]) -> tuple[list[str], list[str]]:
    """(selection, evaluation): the odd and the even lines of the evaluation prompts, so that no γ is chosen on a
    prompt it is then measured on."""
    return list(prompts[1::2]), list(prompts[::2])


def extended(ids: torch.Tensor, filler: torch.Tensor, extra: int) -> torch.Tensor:
    """``ids`` followed by ``extra`` tokens of ``filler`` (repeated as needed): a longer context of the same kind."""
    if extra == 0:
        return ids
    tiled = filler[:, :1].new_empty((1, 0))
    while tiled.shape[1] < extra:
        tiled = torch.cat([tiled, filler], dim=1)
    return torch.cat([ids, tiled[:, :extra]], dim=1)


def context_costs(pair: Pair, head: DraftHead, prompts: Sequence[torch.Tensor], *, repeats: int,
                  extras: Sequence[int] = CONTEXT_EXTRA, max_tokens: int = MAX_TOKENS_PER_PASS) -> list[dict]:
    """Phase 1: per prompt and context length, the raw seconds of every pass (``expert1`` .. ``expert16``,
    ``draft``, ``head``), interleaved over ``repeats`` rounds after a warm-up round."""
    rows = []
    for i, ids in enumerate(prompts):
        for extra in extras:
            ctx = extended(ids, prompts[(i + 1) % len(prompts)], extra)
            steps = {f"expert{n}": ForwardStep(pair.expert, ctx, n) for n in range(1, max_tokens + 1)}
            steps |= {"draft": ForwardStep(pair.amateur, ctx, 1), "head": HeadStep(head, pair.expert, ctx)}
            rows.append({"prompt": i, "extra": extra, "context": ctx.shape[1], "seconds": interleaved(steps, repeats)})
    return rows


def step_ratio(seconds: dict[str, list[float]], name: str) -> float:
    """The median over a row's interleaved rounds of one pass's time / the expert's 1-token step in the same round."""
    return float(np.median(np.asarray(seconds[name]) / np.asarray(seconds["expert1"])))


def longest_pass(seconds: dict[str, list[float]]) -> int:
    return max(int(name.removeprefix("expert")) for name in seconds if name.startswith("expert"))


def summarise_costs(rows: Sequence[dict]) -> dict:
    """c per drafter and r(d) for d = 0..15 (an expert pass over d + 1 tokens / an expert step): each row's median
    per-round ratio, then the median over rows (prompts × context lengths); and the expert's step in seconds."""
    def median_ratio(name: str) -> float:
        return float(np.median([step_ratio(row["seconds"], name) for row in rows]))

    return {"c": {d: median_ratio(d) for d in DRAFTERS},
            "r": {n - 1: median_ratio(f"expert{n}") for n in range(1, longest_pass(rows[0]["seconds"]) + 1)},
            "expert_step_seconds": float(np.median([np.median(row["seconds"]["expert1"]) for row in rows]))}


def forward_cost_by_context(rows: Sequence[dict]) -> dict[int, dict[int, tuple[float, float, float]]]:
    """Notebook 04: {extra context: {n: (median, min, max) over prompts of an n-token pass / a 1-token step}}."""
    out: dict[int, dict[int, tuple[float, float, float]]] = {}
    for extra in sorted({row["extra"] for row in rows}):
        chosen = [row["seconds"] for row in rows if row["extra"] == extra]
        for n in range(1, longest_pass(chosen[0]) + 1):
            values = [step_ratio(t, f"expert{n}") for t in chosen]
            out.setdefault(extra, {})[n] = (float(np.median(values)), min(values), max(values))
    return out


def select(records: Sequence[dict]) -> dict[str, dict[str, int | str]]:
    """Phase 2: per temperature and drafter, the γ with the highest mean speedup over naive decoding (among the
    γ that ``records`` hold)."""
    timed = {rec["config"] for rec in records}
    chosen: dict[str, dict[str, int | str]] = {}
    for t in TEMPERATURES:
        for d in DRAFTERS:
            gammas = [g for g in GAMMAS if config_name(d, g, t) in timed]
            if not gammas or config_name("naive", 0, t) not in timed:
                raise ValueError(f"no timed runs of naive decoding and of {d} at T={t:g} to select from")
            chosen.setdefault(f"T={t:g}", {})[d] = max(
                gammas, key=lambda g, d=d, t=t: mean_speedup(records, config_name("naive", 0, t), config_name(d, g, t)))
    return chosen


def evaluation_configs(pair: Pair, head: DraftHead, chosen: dict, max_new_tokens: int,
                       reference: Pair | None = None) -> dict[str, Decoder]:
    """Phase 3's configurations; with ``reference`` (the fp32 eager pair) also :data:`REFERENCE`."""
    configs = {} if reference is None else {REFERENCE: decoder(reference, head, "naive", 0, 0.0, max_new_tokens)}
    for temperature in TEMPERATURES:
        configs[config_name("naive", 0, temperature)] = decoder(pair, head, "naive", 0, temperature, max_new_tokens)
        for drafter, gamma in chosen[f"T={temperature:g}"].items():
            configs[config_name(drafter, gamma, temperature)] = decoder(pair, head, drafter, gamma, temperature,
                                                                        max_new_tokens)
    return configs


def encoded(pair: Pair, texts: Sequence[str]) -> list[torch.Tensor]:
    return [pair.encode_chat(t) for t in texts]


def check_dtype(dtype: str) -> None:
    """Refuse an unknown dtype, and bf16 where the CPU emulates it (its timings would measure the emulation)."""
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}: choose one of {tuple(DTYPES)}")
    if dtype == "bf16" and not fast_bf16("cpu"):
        raise ValueError("this CPU has no bf16 instructions (helpers.machine.fast_bf16): bf16 would be emulated, "
                         "slower than fp32; time the fp32 paths (--dtype fp32)")


def load(kernels: str, dtype: str = "fp32") -> tuple[Pair, DraftHead]:
    """The pocket pair and the draft head, all three on the execution path ``kernels`` (:mod:`helpers.kernels`)
    with weights in ``dtype`` (the head follows the expert's)."""
    check_dtype(dtype)
    pair = load_pair("pocket", kernels=kernels, dtype=DTYPES[dtype], device="cpu")
    return pair, with_kernels(load_head(pair.expert), kernels)


def path_name(settings: dict) -> str:
    """``"fp32 eager"``, ``"bf16 eager"``, ``"fp32 prepacked"``: the weights' dtype and the kernels of a result file
    (files recorded before ``--dtype`` existed are fp32); ``"int8"`` for the int8 path, whose weights are int8
    whatever ``dtype`` says (the kernels table's name)."""
    if settings.get("kernels") == "int8":
        return "int8"
    return f"{settings.get('dtype', 'fp32')} {settings.get('kernels', 'eager')}"


def evaluation(result: dict) -> tuple[dict[str, Decoder], list[torch.Tensor]]:
    """Phase 3's configurations and prompts for a result file, on the file's execution path."""
    s = result["settings"]
    pair, head = load(s.get("kernels", "eager"), s.get("dtype", "fp32"))
    reference = None if path_name(s) == "fp32 eager" else load("eager")[0]
    configs = evaluation_configs(pair, head, result["selected"], s["max_new_tokens"], reference)
    return configs, encoded(pair, result["evaluation_prompts"])


def evaluate_run(out: Path, run: int, command: str | None = None) -> None:
    """Phase 3, one run (:func:`helpers.protocol.append_run`)."""
    append_run(out, run, evaluation, seed=1000 + run, command=command)


def show(result: dict) -> str:
    """A result file's table and README row."""
    return f"{markdown_table(result)}\n\n{readme_row(result)}"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_file_arguments(parser, "two prompts, a few tokens: a smoke test, no intervals")
    parser.add_argument("--kernels", choices=KERNELS, default="eager", help="the models' execution path")
    parser.add_argument("--dtype", choices=tuple(DTYPES), default="fp32",
                        help="the models' weights; bf16 only on a CPU with bf16 instructions")
    for key, value in DEFAULTS.items():
        parser.add_argument(f"--{key.replace('_', '-')}", type=int, default=None, help=f"default {value}")
    args = parser.parse_args(argv)
    if file_command(args, "helpers.speed", evaluate_run, show):
        return
    settings = {**DEFAULTS, **(QUICK if args.quick else {}),
                **{k: getattr(args, k) for k in DEFAULTS if getattr(args, k) is not None}}
    started = time.time()
    pair, head = load(args.kernels, args.dtype)
    selection, evaluation = split(read_prompts(EVAL_PROMPTS))
    selection, evaluation = selection[:settings["select_prompts"]], evaluation[:settings["eval_prompts"]]
    result = {"command": "python -m helpers.speed " + " ".join(sys.argv[1:] if argv is None else argv),
              "settings": {**settings, "runs": args.runs, "gammas": list(GAMMAS), "dynamic": [DYNAMIC_MAX, CONFIDENCE],
                           "temperatures": list(TEMPERATURES), "context_extra": list(CONTEXT_EXTRA),
                           "prompts_file": EVAL_PROMPTS.name, "chat_template": True, "eos": True,
                           "kernels": args.kernels, "dtype": args.dtype},
              "machine": machine_info(pair.device), "selection_prompts": selection, "evaluation_prompts": evaluation}
    result["costs"] = context_costs(pair, head, encoded(pair, evaluation[:settings["cost_prompts"]]),
                                    repeats=settings["cost_repeats"])
    candidates = {config_name("naive", 0, t): decoder(pair, head, "naive", 0, t, settings["select_tokens"])
                  for t in TEMPERATURES}
    candidates |= {config_name(d, g, t): decoder(pair, head, d, g, t, settings["select_tokens"])
                   for t in TEMPERATURES for d in DRAFTERS for g in GAMMAS}
    result["selection_runs"] = timed_runs(candidates, encoded(pair, selection), rounds=1)
    result["selected"] = select(result["selection_runs"])
    result["setup_seconds"] = time.time() - started
    start_runs(result, args.out, "helpers.speed", args.runs)
    print(markdown_table(json.loads(args.out.read_text())))


def explained(records: Sequence[dict], c: float, r: dict[int, float]) -> float:
    """The mean over runs of the speedup the cost model explains from each run's counted draft lengths."""
    return float(np.mean([speedup_from_counts([d for d, _ in rec["rounds"]], len(rec["tokens"]), c, r)
                          for rec in records]))


def same_text(records: Sequence[dict], base: str, name: str) -> tuple[int, int]:
    """Greedy: (how many timed runs of ``name`` wrote naive decoding's tokens on the same prompt and round, of how
    many). All of them in fp32, up to near-ties (notebook 03); in bf16 a verification pass and a 1-token step round
    differently enough to part the texts (:func:`helpers.kernels.fidelity`)."""
    naive_tokens = {(rec["prompt"], rec["round"]): rec["tokens"] for rec in records if rec["config"] == base}
    runs = [rec for rec in records if rec["config"] == name]
    return sum(rec["tokens"] == naive_tokens[rec["prompt"], rec["round"]] for rec in runs), len(runs)


def round_costs(records: Sequence[dict], base: str, name: str) -> dict[int, list[float]]:
    """The whole drafting round, timed directly: every round but the first (which also reads the prompt) of every
    run of ``name``, in seconds / the median step (but the first) of naive decoding (``base``) on the same prompt
    in the same timing round, grouped by the round's draft length d. The speedup of a run is its tokens per round
    over this ratio; the cost model predicts d·c + r(d) (:func:`summary`'s ``round_cost``), and the difference
    is the work of a round outside its bare forward passes, relative to naive decoding's own (the head's catch-up
    pass, readouts, acceptance, cache rollback). Empty for files recorded before rounds were timed."""
    steps = {(rec["prompt"], rec["round"]): float(np.median(rec["round_seconds"][1:]))
             for rec in records if rec["config"] == base and len(rec.get("round_seconds", [])) > 1}
    out: dict[int, list[float]] = {}
    for rec in records:
        step = steps.get((rec["prompt"], rec["round"]))
        if rec["config"] != name or step is None or "round_seconds" not in rec:
            continue
        for (drafted, _), seconds in zip(rec["rounds"][1:], rec["round_seconds"][1:], strict=True):
            out.setdefault(drafted, []).append(seconds / step)
    return out


def round_cost(runs: Sequence[Sequence[dict]], base: str, name: str, c: float, r: dict[int, float]) -> dict[int, dict]:
    """Per draft length d: how many rounds were timed, their median in naive steps (:func:`round_costs`, every run's
    rounds pooled; each run numbers its prompts and timing rounds from 0) and the cost model's d·c + r(d)."""
    timed: dict[int, list[float]] = {}
    for records in runs:
        for d, ratios in round_costs(records, base, name).items():
            timed.setdefault(d, []).extend(ratios)
    return {d: {"rounds": len(v), "measured": float(np.median(v)), "explained": d * c + r[d]}
            for d, v in sorted(timed.items()) if d in r}


def summary(result: dict) -> dict:
    """What README and notebooks print, per temperature and drafter (see the module docstring)."""
    costs = summarise_costs(result["costs"])
    runs = [run["records"] for run in result["runs"]]
    out = {"costs": costs, "selected": result["selected"], "runs": len(runs),
           "prompts": len(result["evaluation_prompts"])}
    for temperature in TEMPERATURES:
        base = config_name("naive", 0, temperature)
        for drafter, gamma in result["selected"][f"T={temperature:g}"].items():
            name = config_name(drafter, gamma, temperature)
            recs = [rec for records in runs for rec in records if rec["config"] == name]
            tokens = sum(len(rec["tokens"]) for rec in recs)
            rounds = [c for rec in recs for c in rec["rounds"]]
            enough = out["prompts"] >= MIN_PROMPTS
            entry = {"gamma": gamma, "speedup": across_runs(runs, base, name) if enough else None,
                     "speedup_per_run": [mean_speedup(records, base, name) for records in runs],
                     "alpha": mean_of([rec["alpha"] for rec in recs if not math.isnan(rec["alpha"])]),
                     "alpha_by_depth": depth_acceptance(rounds),
                     "share_kept": sum(k for _, k in rounds) / max(1, sum(d for d, _ in rounds)),
                     "tokens_per_call": tokens / sum(rec["expert_calls"] for rec in recs),
                     "mean_draft": float(np.mean([d for d, _ in rounds if d > 0])),
                     "explained": explained(recs, costs["c"][drafter], costs["r"]),
                     "explained_free": explained(recs, costs["c"][drafter], dict.fromkeys(costs["r"], 1.0))}
            entry["model_gap"] = float(np.mean(entry["speedup_per_run"])) / entry["explained"]
            entry["round_cost"] = round_cost(runs, base, name, costs["c"][drafter], costs["r"])
            if temperature == 0:
                same = [same_text(records, base, name) for records in runs]
                entry["same_text"] = (sum(k for k, _ in same), sum(n for _, n in same))
                if measured_reference(runs):
                    entry["versus_reference"] = across_runs(runs, REFERENCE, name) if enough else None
            out[name] = entry
    if measured_reference(runs):
        base = config_name("naive", 0, 0.0)
        out[base] = {"versus_reference": across_runs(runs, REFERENCE, base) if out["prompts"] >= MIN_PROMPTS else None}
    return out


def held_out_coverage(result: dict, vocab: torch.Tensor) -> float:
    """The share of the fp32 expert's greedy tokens on the evaluation requests that lie in ``vocab`` (a head's
    V_draft): what a trimmed head can draft at all on held-out text (:func:`helpers.ablation.held_out_coverage`).
    Every request counts once (the first run's first timing round); on another path than fp32 the file's
    fp32 eager reference runs (:data:`REFERENCE`) supply the text."""
    name = config_name("naive", 0, 0.0) if path_name(result["settings"]).startswith("fp32") else REFERENCE
    greedy = [r for r in result["runs"][0]["records"] if r["config"] == name and r["round"] == 0]
    if not greedy:
        raise ValueError(f"{result['command']!r} recorded no greedy text of the fp32 expert ({name!r}); measure the "
                         "coverage on an fp32 file")
    return ablation.held_out_coverage(greedy, vocab)


def measured_reference(runs: Sequence[Sequence[dict]]) -> bool:
    """Whether every run timed :data:`REFERENCE` (files recorded before it existed did not)."""
    return bool(runs) and all(any(rec["config"] == REFERENCE for rec in records) for records in runs)


def reference_text(s: dict) -> str:
    """Greedy, against naive decoding with the fp32 eager expert in the same timing rounds: ``naive 2.1× [...]; head …``
    (empty where the file has no :data:`REFERENCE`)."""
    names = [config_name("naive", 0, 0.0)] + [config_name(d, g, 0.0) for d, g in s["selected"]["T=0"].items()]
    if not all("versus_reference" in s.get(name, {}) for name in names):
        return ""
    cells = []
    for name in names:
        versus = s[name]["versus_reference"]
        label = name.removesuffix(" T=0")
        cells.append(f"{label} {interval_text(versus['pooled'])}" if versus
                     else f"{label} (no interval from fewer than {MIN_PROMPTS} prompts)")
    return "greedy, over naive decoding with the fp32 eager expert in the same timing rounds: " + "; ".join(cells)


def bound(x: float) -> str:
    """Two decimals, three where two would print a bound that is not 1 as 1.00 (which side of 1 it lies on is the
    claim an interval makes)."""
    return f"{x:.3f}" if f"{x:.2f}" == "1.00" and round(x, 3) != 1 else f"{x:.2f}"


def interval_text(i: Interval) -> str:
    """``1.16× [1.12, 1.21]``, with :func:`bound` for the ends."""
    return f"{i.mean:.2f}× [{bound(i.low)}, {bound(i.high)}]"


def speedup_text(entry: dict) -> str:
    """``0.74× [0.71, 0.77] (runs 0.73×, 0.75×)``, or only the runs' means below :data:`MIN_PROMPTS` prompts."""
    runs = ", ".join(f"{s:.2f}×" for s in entry["speedup_per_run"])
    if entry["speedup"] is None:
        return f"runs {runs} (no interval from fewer than {MIN_PROMPTS} prompts)"
    pooled = entry["speedup"]["pooled"]
    return f"{interval_text(pooled)} (runs {runs})"


def tried_gammas(result: dict) -> str:
    """The draft lengths the file's selection timed (any drafter, any temperature), e.g. ``1..6 and dynamic``."""
    timed = {rec["config"] for rec in result["selection_runs"]}
    tried = [g for g in GAMMAS if any(config_name(d, g, t) in timed for d in DRAFTERS for t in TEMPERATURES)]
    fixed = [g for g in tried if isinstance(g, int)]
    text = f"{fixed[0]}..{fixed[-1]}" if fixed == list(range(fixed[0], fixed[-1] + 1)) else ", ".join(map(str, fixed))
    return text + (" and dynamic" if "dynamic" in tried else "")


def markdown_table(result: dict) -> str:
    """Notebooks 05 and 07: per temperature and drafter, the selected γ, the pooled speedup with its interval and
    every run's, α, α by depth, the share kept, tokens per expert call, the explained speedup and the model gap."""
    s = summary(result)
    lines = ["| drafter | T | γ (selected) | speedup vs naive, pooled [95 % CI] (each run) | "
             "α (T = 0: greedy agreement) | α by depth 1, 2, 3 | drafts kept | tokens/expert call | explained | "
             "measured / explained |",
             "|---|---:|---:|---|---:|---|---:|---:|---:|---:|"]
    for temperature in TEMPERATURES:
        for drafter, gamma in s["selected"][f"T={temperature:g}"].items():
            e = s[config_name(drafter, gamma, temperature)]
            depth = ", ".join(f"{a:.2f}" for a in e["alpha_by_depth"][:3])
            lines.append(f"| {drafter} | {temperature:g} | {gamma} | {speedup_text(e)} | {e['alpha'].mean:.3f} | "
                         f"{depth} | {e['share_kept']:.2f} | {e['tokens_per_call']:.2f} | {e['explained']:.2f}× | "
                         f"{e['model_gap']:.2f} |")
    c, r = s["costs"]["c"], s["costs"]["r"]
    st = result["settings"]
    contexts = ", +".join(map(str, CONTEXT_EXTRA))
    step_ms = s["costs"]["expert_step_seconds"] * 1e3
    shown = [d for d in range(1, 7) if d in r]
    r_text = ", ".join(f"{r[d]:.2f}" for d in shown)
    lines += ["",
              f"- costs (median over {st['cost_prompts']} prompts × contexts +{contexts} tokens): expert step "
              f"{step_ms:.0f} ms, c: draft {c['draft']:.3f}, head {c['head']:.3f}; "
              f"r(d) for d = {shown[0]}..{shown[-1]}: {r_text}",
              f"- {s['prompts']} held-out requests (data/eval_prompts.txt) × {st['rounds']} shuffled timing rounds × "
              f"{s['runs']} runs "
              f"(separate processes), up to {st['max_new_tokens']} tokens, chat template, EOS on; γ selected among "
              f"{tried_gammas(result)} on {len(result['selection_prompts'])} other requests ({st['select_tokens']} "
              "tokens, 1 timing round)",
              f"- {result['machine']['cpu_kind']}, {result['machine']['threads']} threads"
              + ("" if path_name(st) == "fp32 eager" else f", the {path_name(st)} path (helpers.kernels)")
              + f"; {commands(result)}"]
    if reference_text(s):
        lines.append(f"- {reference_text(s)}")
    return "\n".join(lines)


def per_request(result: dict, config: str) -> dict[int, float]:
    """Each request's seconds per token under ``config`` (median over its timing rounds), averaged over the runs."""
    runs = [seconds_per_token(run["records"], config) for run in result["runs"]]
    return {i: float(np.mean([run[i] for run in runs])) for i in runs[0]}


def naive_ms_per_run(result: dict, temperature: float = 0.0) -> list[float]:
    """Naive decoding's ms per token in each run (the median over requests of each request's median over its timing
    rounds): how the machine's own speed moved between runs, which the speedups, ratios within a timing round, hide."""
    name = config_name("naive", 0, temperature)
    return [1e3 * float(np.median(list(seconds_per_token(run["records"], name).values()))) for run in result["runs"]]


def paths_table(by_path: dict[str, dict]) -> tuple[list[str], dict[tuple[str, float], tuple[int | str, dict]]]:
    """Notebook 04's execution paths side by side (label -> a speed file of one CPU, on the same requests): per path,
    temperature and drafter the selected γ, c, r(γ), α, the speedup over naive decoding on the same path and naive
    decoding's median ms per token, then each path's runs and commands. Returns the lines and, per (path, T), the
    head's (γ, summary entry)."""
    assert len({tuple(r["evaluation_prompts"]) for r in by_path.values()}) == 1, "the same held-out requests"
    lines = ["α at T = 0 is the greedy agreement (notation box in 00)",
             "path            T  drafter γ        c      r(γ)  α      speedup over naive decoding on the same path"
             "    naive ms/token"]
    head_rows = {}
    for label, result in by_path.items():
        s = summary(result)
        for t in TEMPERATURES:
            naive_ms = 1e3 * float(np.median(list(per_request(result, config_name("naive", 0, t)).values())))
            for drafter in DRAFTERS:
                gamma = s["selected"][f"T={t:g}"][drafter]
                entry = s[config_name(drafter, gamma, t)]
                r_gamma = f"{s['costs']['r'][gamma]:.2f}" if gamma != "dynamic" else "  – "
                if drafter == "head":
                    head_rows[label, t] = (gamma, entry)
                lines.append(f"{label:15s} {t:g}  {drafter:5s} {gamma!s:9s} {s['costs']['c'][drafter]:.3f}  {r_gamma}  "
                             f"{entry['alpha'].mean:.3f}  {speedup_text(entry):46s}  {naive_ms:.1f}")
        chosen_on = f"{len(result['selection_prompts'])} other requests, {result['settings']['select_tokens']} tokens"
        lines.append(f"  ({label}: {s['runs']} run(s) of {s['prompts']} requests; γ selected on {chosen_on}, "
                     f"1 timing round; {commands(result)})")
    return lines, head_rows


def reference_lines(by_path: dict[str, dict], eager: str = "fp32 eager") -> list[str]:
    """For every path whose runs also timed :data:`REFERENCE`: greedy speedups over the fp32 eager expert's naive
    decoding in the same timing rounds, and that reference's ms per token beside the ``eager`` file's own."""
    eager_ms = 1e3 * float(np.median(list(per_request(by_path[eager], config_name("naive", 0, 0.0)).values())))
    each_run = ", ".join(f"{ms:.1f}" for ms in naive_ms_per_run(by_path[eager]))
    lines = []
    for label, result in by_path.items():
        if measured_reference([run["records"] for run in result["runs"]]):
            reference_ms = 1e3 * float(np.median(list(per_request(result, REFERENCE).values())))
            lines.append(f"{label}, {reference_text(summary(result))}; fp32 eager naive decoding in those timing "
                         f"rounds: {reference_ms:.1f} ms/token (the {eager} file above: {eager_ms:.1f}, its runs "
                         f"pooled; each run: {each_run})")
    return lines


def round_cost_table(result: dict, min_rounds: int = 20) -> str:
    """Notebook 07: per drafter, temperature and draft length d (with at least ``min_rounds`` timed rounds), a
    whole drafting round in naive decoding's steps (:func:`round_costs`, median) beside the cost model's
    d·c + r(d); "" where the file timed no rounds."""
    s = summary(result)
    entries = [([drafter, f"{temperature:g}", str(gamma)], s[config_name(drafter, gamma, temperature)]["round_cost"])
               for temperature in TEMPERATURES for drafter, gamma in s["selected"][f"T={temperature:g}"].items()]
    return round_cost_markdown(["drafter", "T", "γ (selected)"], entries, min_rounds)


def round_cost_markdown(columns: Sequence[str], entries: Sequence[tuple[Sequence[str], dict[int, dict]]],
                        min_rounds: int = 20) -> str:
    """The whole-round table of :func:`round_cost_table` (and :func:`helpers.sidebyside.round_cost_table`): every
    entry's leading ``columns`` cells, then one row per draft length d with at least ``min_rounds`` timed rounds
    (:func:`round_cost`); "" where no d has that many."""
    lines = ["| " + " | ".join([*columns, "draft length d", "draft-and-verify rounds timed",
                                 "a round, in naive steps (median)", "d·c + r(d)", "measured − model"]) + " |",
             "|---|" + "---:|" * (len(columns) + 4)]
    for cells, by_length in entries:
        for d, e in by_length.items():
            if e["rounds"] >= min_rounds:
                gap = e["measured"] - e["explained"]
                lines.append("| " + " | ".join([*cells, str(d), str(e["rounds"]), f"{e['measured']:.2f}",
                                                 f"{e['explained']:.2f}", f"{gap:+.2f}"]) + " |")
    return "\n".join(lines) if len(lines) > 2 else ""


NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def notebooks_reading(result: dict) -> str:
    """``"notebooks 04, 05, 07"``: the numbered notebooks whose parameters cell names this result's file (from its
    recorded ``--out``), for the README row; ``""`` where none does (or no notebooks are at hand)."""
    name = Path(result["command"].split("--out", 1)[1].split()[0]).name if "--out" in result["command"] else None
    readers = []
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        parameters = "".join(next((c["source"] for c in cells if "parameters" in c["metadata"].get("tags", [])), []))
        if name and f'"{name}"' in parameters:
            readers.append(path.name[:2])
    return f"notebook{'s' if len(readers) > 1 else ''} {', '.join(readers)}" if readers else ""


def readme_row(result: dict) -> str:
    """The README's row for this result file (a test checks that the README holds it verbatim)."""
    s = summary(result)
    st = result["settings"]
    exact = path_name(st).startswith("fp32")

    def cell(drafter: str, gamma: int | str, temperature: float) -> str:
        entry = s[config_name(drafter, gamma, temperature)]
        same = "" if exact or temperature else " ({} of {} texts naive decoding's)".format(*entry["same_text"])
        return f"{drafter} γ = {gamma}: {speedup_text(entry)}{same}"

    parts = []
    for temperature in TEMPERATURES:
        drafters = "; ".join(cell(drafter, gamma, temperature)
                             for drafter, gamma in s["selected"][f"T={temperature:g}"].items())
        parts.append(f"{'greedy' if temperature == 0 else f'T = {temperature:g}'}: {drafters}")
    eager = path_name(st) == "fp32 eager"
    where = notebooks_reading(result)
    runs = f"{s['runs']} run{'s' if s['runs'] != 1 else ''}"
    what = (f"**the distilled draft and the draft head, one protocol** ({where + '; ' if where else ''}"
            f"{s['prompts']} held-out chat "
            f"requests, chat template, EOS on, up to {st['max_new_tokens']} tokens, {st['rounds']} shuffled timing "
            f"rounds × {runs}; γ selected on {len(result['selection_prompts'])} other requests; speedup over naive "
            "decoding"
            + ("" if eager else f" on the same {path_name(st)} path") + ", pooled [95 % CI] and each run)")
    if reference_text(s):
        parts.append(reference_text(s))
    return f"| {what} | {result['machine']['cpu_kind']} | {' — '.join(parts)} | {commands(result)} |"


if __name__ == "__main__":
    main()
