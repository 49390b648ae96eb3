"""Every drafter of notebooks 03-07 side by side, by the tutorial's protocol (:mod:`helpers.protocol`) on held-out
requests (chat template, EOS on, greedy): the chat requests of ``data/eval_prompts.txt`` (notebook 07's section 5)
or, with ``--prompts grounded``, the input-grounded ones of ``data/grounded_prompts.txt`` (notebook 06's section 2).

``python -m helpers.sidebyside --out data/results/sidebyside-[grounded-]<cpu>.json [--prompts chat|grounded]
[--runs 2] [--quick]`` (``--show`` prints an existing file's table; ``--add-run`` appends one more evaluation run on a
machine of the same CPU kind) writes one file with its command, settings, machine and every raw record, in three
phases:

1. **costs**: on the first ``--cost-prompts`` evaluation requests, every drafter's c (one draft step / one expert
   step) and r(d) for every draft length d up to :data:`LONGEST` (:func:`helpers.timing.drafter_costs`, interleaved);
2. **selection**: on the selection split (:func:`helpers.speed.split`, never measured on), every drafter at each
   γ of :data:`CANDIDATES`, one timing round; each drafter's fastest γ (:func:`select`);
3. **evaluation** (``--runs`` separate processes): naive decoding and every drafter at its selected γ, in shuffled
   timing rounds (:func:`helpers.protocol.timed_runs`).

The drafters (:data:`DRAFTERS`): the distilled draft (notebook 05), the draft head (07), an fp16 copy of the expert
(06; it pays only where half precision is fast) and prompt lookup (06; no draft model). The learned drafters'
temperature-1 speeds and the cost model's account of them are :mod:`helpers.speed`'s; transformers' assisted
generation is compared with ours in notebook 04 (:mod:`helpers.bench`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from helpers.data import EVAL_PROMPTS, GROUNDED_PROMPTS, read_prompts
from helpers.decoding import prompt_lookup, speculative
from helpers.decoding.lookup import lookup_draft
from helpers.heads import DraftHead, HeadStep
from helpers.machine import machine_info
from helpers.models import Pair, self_draft
from helpers.protocol import (
    MIN_PROMPTS,
    Decoder,
    across_runs,
    add_file_arguments,
    append_run,
    commands,
    file_command,
    mean_speedup,
    start_runs,
    timed_runs,
)
from helpers.speed import (
    DYNAMIC_MAX,
    config_name,
    decoder,
    encoded,
    explained,
    interval_text,
    load,
    round_cost,
    round_cost_markdown,
    same_text,
    split,
)
from helpers.timing import ForwardStep, drafter_costs

DRAFTERS = ("draft", "head", "self-draft", "lookup")
"""The distilled draft, the draft head, the fp16 copy of the expert, prompt lookup."""
CANDIDATES: dict[str, tuple[int | str, ...]] = {"draft": (1, 2, 3, 4, "dynamic"), "head": (1, 2, 3, 4, "dynamic"),
                                                "self-draft": (1, 2, 4, 6), "lookup": (1, 2, 4, 6, 8)}
"""The draft lengths the selection tries per drafter ("dynamic": :mod:`helpers.speed`'s dynamic length; prompt
lookup drafts up to γ tokens where it finds a match)."""
LONGEST = max(DYNAMIC_MAX, *(g for gammas in CANDIDATES.values() for g in gammas if isinstance(g, int)))
"""The longest draft: the cost phase measures r(d) up to it."""
LABELS = {"draft": "distilled draft", "head": "draft head", "self-draft": "fp16 self-draft",
          "lookup": "prompt lookup"}
NAIVE = config_name("naive", 0, 0.0)
PROMPT_SETS = {"chat": (EVAL_PROMPTS, "held-out chat requests", "07"),
               "grounded": (GROUNDED_PROMPTS, "held-out input-grounded requests", "06")}
"""``--prompts``: the file, what its requests are called in the tables, the notebook that reads the result."""
DEFAULTS = {"cost_prompts": 5, "cost_repeats": 10, "select_prompts": 8, "select_tokens": 32, "eval_prompts": 20,
            "rounds": 3, "max_new_tokens": 48}
QUICK = {"cost_prompts": 1, "cost_repeats": 2, "select_prompts": 2, "select_tokens": 8, "eval_prompts": 2,
         "rounds": 1, "max_new_tokens": 8}
"""``--quick``: every phase on a prompt or two with a few tokens (a smoke test of the protocol, no intervals)."""


def prompt_set(result: dict) -> tuple[str, str]:
    """What a result file's requests are called and the notebook that reads it (files without ``prompts`` are
    ``chat``)."""
    _, name, notebook = PROMPT_SETS[result["settings"].get("prompts", "chat")]
    return name, notebook


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' * (n != 1)}"


def drafter_decoder(pair: Pair, head: DraftHead, fp16: torch.nn.Module, drafter: str, gamma: int | str,
                    max_new_tokens: int) -> Decoder:
    """One greedy configuration: naive decoding or a drafter at draft length γ (the learned drafters through
    :func:`helpers.speed.decoder`)."""
    if drafter in ("naive", "draft", "head"):
        return decoder(pair, head, drafter, gamma, 0.0, max_new_tokens)
    common = {"max_new_tokens": max_new_tokens, "temperature": 0.0, "eos_token_id": pair.eos_token_id}
    if drafter == "self-draft":
        return lambda ids, seed: speculative(pair.expert, fp16, ids, gamma=gamma, **common)
    if drafter == "lookup":
        return lambda ids, seed: prompt_lookup(pair.expert, ids, gamma=gamma, **common)
    raise ValueError(f"unknown drafter {drafter!r}: choose 'naive' or one of {DRAFTERS}")


def costs(pair: Pair, head: DraftHead, fp16: torch.nn.Module, prompts: Sequence[torch.Tensor], *,
          repeats: int) -> list[dict]:
    """Phase 1: per prompt, every drafter's c and r(d) for d = 1..:data:`LONGEST`."""
    rows = []
    for i, ids in enumerate(prompts):
        context = ids[0].tolist()
        steps = {"draft": ForwardStep(pair.amateur, ids, 1), "head": HeadStep(head, pair.expert, ids),
                 "self-draft": ForwardStep(fp16, ids, 1), "lookup": lambda context=context: lookup_draft(context, 1)}
        c, r = drafter_costs(pair.expert, ids, steps, range(1, LONGEST + 1), repeats)
        rows.append({"prompt": i, "c": c, "r": {str(d): v for d, v in r.items()}})
    return rows


def select(records: Sequence[dict]) -> dict[str, int | str]:
    """Phase 2: per drafter, the γ with the highest mean speedup over naive decoding among those ``records`` hold."""
    timed = {rec["config"] for rec in records}
    chosen: dict[str, int | str] = {}
    for drafter in DRAFTERS:
        gammas = [g for g in CANDIDATES[drafter] if config_name(drafter, g, 0.0) in timed]
        if not gammas or NAIVE not in timed:
            raise ValueError(f"no timed runs of naive decoding and of {drafter} to select from")
        chosen[drafter] = max(gammas, key=lambda g, d=drafter: mean_speedup(records, NAIVE, config_name(d, g, 0.0)))
    return chosen


def evaluation(result: dict) -> tuple[dict[str, Decoder], list[torch.Tensor]]:
    """Phase 3's configurations (naive decoding and every drafter at its selected γ) and prompts."""
    pair, head = load("eager")
    fp16 = self_draft(pair.expert)
    n = result["settings"]["max_new_tokens"]
    configs = {NAIVE: drafter_decoder(pair, head, fp16, "naive", 0, n)}
    configs |= {config_name(d, g, 0.0): drafter_decoder(pair, head, fp16, d, g, n)
                for d, g in result["selected"].items()}
    return configs, encoded(pair, result["evaluation_prompts"])


def evaluate_run(out: Path, run: int, command: str | None = None) -> None:
    """Phase 3, one run (:func:`helpers.protocol.append_run`)."""
    append_run(out, run, evaluation, seed=2000 + run, command=command)


# --------------------------------------------------------------------------------------------- summary
def cost_medians(result: dict) -> tuple[dict[str, float], dict[int, float]]:
    """Every drafter's c and r(d) for every d the file measured: medians over the cost prompts."""
    rows = result["costs"]
    c = {drafter: float(np.median([row["c"][drafter] for row in rows])) for drafter in rows[0]["c"]}
    r = {int(d): float(np.median([row["r"][d] for row in rows])) for d in rows[0]["r"]}
    return c, r


def summary(result: dict) -> dict[str, dict]:
    """Per drafter at its selected γ: the speedup over naive decoding of every run, pooled and their spread
    (intervals from :data:`~helpers.protocol.MIN_PROMPTS` requests on, else the mean alone); greedy agreement
    (mean β over runs with draft positions), drafts kept, tokens per expert call, how many texts were naive
    decoding's; c and r(γ) (medians over the cost prompts; r of the longest draft for a dynamic length); the speedup
    the cost model explains from the counted draft lengths with that c and r(d) (:func:`helpers.speed.explained`:
    bare passes, the prompt's prefill and the work around the passes left out); and, per draft length d, a whole
    drafting round timed in naive decoding's steps beside d·c + r(d) (:func:`helpers.speed.round_cost`; empty for
    files recorded before rounds were timed)."""
    runs = [run["records"] for run in result["runs"]]
    cost_c, r = cost_medians(result)
    out = {}
    for drafter, gamma in result["selected"].items():
        name = config_name(drafter, gamma, 0.0)
        records = [rec for run in runs for rec in run if rec["config"] == name]
        enough = len(result["evaluation_prompts"]) >= MIN_PROMPTS
        speed = (across_runs(runs, NAIVE, name) if enough else
                 {"per_run": [mean_speedup(run, NAIVE, name) for run in runs], "pooled": None})
        rounds = [counts for rec in records for counts in rec["rounds"]]
        alphas = [rec["alpha"] for rec in records if rec["alpha"] is not None and rec["alpha"] == rec["alpha"]]
        same = [same_text(run, NAIVE, name) for run in runs]
        d = DYNAMIC_MAX if gamma == "dynamic" else gamma
        out[drafter] = {
            "gamma": gamma, "speedup": speed,
            "alpha": float(np.mean(alphas)) if alphas else None,
            "kept": sum(k for _, k in rounds) / max(1, sum(dr for dr, _ in rounds)),
            "tokens_per_call": sum(len(rec["tokens"]) for rec in records) / sum(rec["expert_calls"] for rec in records),
            "same_text": (sum(a for a, _ in same), sum(b for _, b in same)),
            "c": cost_c[drafter], "r": r[d], "explained": explained(records, cost_c[drafter], r),
            "round_cost": round_cost(runs, NAIVE, name, cost_c[drafter], r)}
    return out


def over(result: dict, slow: str, fast: str) -> dict:
    """The speedup of drafter ``fast`` over drafter ``slow``, both at their selected γ, paired by request like every
    protocol speedup: every run's, pooled, and their spread (:func:`helpers.protocol.across_runs`; from
    :data:`~helpers.protocol.MIN_PROMPTS` requests on)."""
    runs = [run["records"] for run in result["runs"]]
    return across_runs(runs, config_name(slow, result["selected"][slow], 0.0),
                       config_name(fast, result["selected"][fast], 0.0))


def lead_line(result: dict, rows: dict[str, dict]) -> str:
    """The fastest drafter's speedup over each other drafter (empty below :data:`~helpers.protocol.MIN_PROMPTS`
    requests): whether it leads the table by more than the rows' separate intervals show."""
    if len(result["evaluation_prompts"]) < MIN_PROMPTS:
        return ""
    best = max(rows, key=lambda d: rows[d]["speedup"]["pooled"].mean)
    leads = "; ".join(f"over {LABELS[d]} {interval_text(over(result, d, best)['pooled'])}" for d in rows if d != best)
    return f"- the fastest, {LABELS[best]}, over each other drafter, paired by request (pooled [95 % CI]): {leads}"


def speedup_cell(entry: dict) -> str:
    speed = entry["speedup"]
    if speed["pooled"] is None:
        return f"{', '.join(f'{v:.2f}×' for v in speed['per_run'])} (no interval: fewer than {MIN_PROMPTS} requests)"
    runs = ", ".join(f"{s.mean:.2f}×" for s in speed["per_run"])
    return f"{interval_text(speed['pooled'])} ({runs})"


def markdown_table(result: dict) -> str:
    """The summary as a Markdown table, with the settings and the machine under it."""
    s, rows = result["settings"], summary(result)
    lines = ["| drafter | γ (selected) | speedup vs naive, pooled [95 % CI] (each run) | greedy agreement "
             "| drafts kept | tokens/expert call | c | r(γ) | explained | measured / explained "
             "| texts naive decoding's |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for drafter, e in rows.items():
        alpha = "–" if e["alpha"] is None else f"{e['alpha']:.2f}"
        measured = e["speedup"]["pooled"].mean if e["speedup"]["pooled"] else float(np.mean(e["speedup"]["per_run"]))
        lines.append(f"| {LABELS[drafter]} | {e['gamma']} | {speedup_cell(e)} | {alpha} | {e['kept']:.2f} | "
                     f"{e['tokens_per_call']:.2f} | {e['c']:.3g} | {e['r']:.2f} | {e['explained']:.2f}× | "
                     f"{measured / e['explained']:.2f} | {e['same_text'][0]} of {e['same_text'][1]} |")
    tried = "; ".join(f"{LABELS[d]} {', '.join(map(str, g))}" for d, g in s["candidates"].items())
    lines += ["", f"- {len(result['evaluation_prompts'])} {prompt_set(result)[0]} (chat template, EOS on), greedy, up "
                  f"to {s['max_new_tokens']} tokens, {plural(s['rounds'], 'shuffled timing round')} × "
                  f"{plural(len(result['runs']), 'run')}; γ selected on {len(result['selection_prompts'])} other "
                  f"requests ({s['select_tokens']} tokens, one timing round) from {tried}",
              f"- c and r: medians over {plural(s['cost_prompts'], 'request')} of {s['cost_repeats']} interleaved "
              f"timing rounds; r(γ) for a dynamic length is r({DYNAMIC_MAX}), its longest draft",
              f"- {result['machine']['cpu_kind']}, {result['machine']['threads']} threads, fp32 eager; reproduce with: "
              f"{commands(result)}"]
    lead = lead_line(result, rows)
    return "\n".join(lines + [lead] * bool(lead))


def mean_round(entry: dict) -> float:
    """A drafter's mean timed round in naive steps: its ``round_cost`` medians per draft length, weighted by their
    rounds timed. Notebook 07's rule of thumb: speedup ≈ tokens per expert call / this."""
    rows = entry["round_cost"].values()
    return sum(e["rounds"] * e["measured"] for e in rows) / sum(e["rounds"] for e in rows)


def thumb_text(drafter: str, entry: dict) -> str:
    """``fp16 self-draft 6.69 / 4.44 = 1.51× (measured 1.34×)``: the rule of thumb of :func:`mean_round` beside the
    measured speedup (pooled, or the runs' mean below :data:`~helpers.protocol.MIN_PROMPTS` requests)."""
    speed = entry["speedup"]
    measured = speed["pooled"].mean if speed["pooled"] else float(np.mean(speed["per_run"]))
    rounds = mean_round(entry)
    tokens = entry["tokens_per_call"]
    return f"{LABELS[drafter]} {tokens:.2f} / {rounds:.2f} = {tokens / rounds:.2f}× (measured {measured:.2f}×)"


def round_cost_table(result: dict, min_rounds: int = 20) -> str:
    """Notebook 07: per drafter at its selected γ and draft length d (with at least ``min_rounds`` timed rounds), a
    whole drafting round in naive decoding's steps beside the cost model's d·c + r(d) (the layout of
    :func:`helpers.speed.round_cost_table`); "" where the file timed no rounds."""
    entries = [([LABELS[drafter], str(e["gamma"])], e["round_cost"]) for drafter, e in summary(result).items()]
    return round_cost_markdown(["drafter", "γ (selected)"], entries, min_rounds)


def readme_row(result: dict) -> str:
    """The README's row (a test checks that the README holds it verbatim)."""
    s, rows = result["settings"], summary(result)
    name, notebook = prompt_set(result)
    what = (f"**the four deployable drafters side by side, one protocol** (notebook {notebook}; "
            f"{len(result['evaluation_prompts'])} {name}, chat template, EOS on, greedy, up to "
            f"{s['max_new_tokens']} tokens, "
            f"{plural(s['rounds'], 'shuffled timing round')} × {plural(len(result['runs']), 'run')}; γ selected on "
            f"{len(result['selection_prompts'])} other requests, prompt lookup's up to γ = "
            f"{max(g for g in s['candidates']['lookup'] if isinstance(g, int))}; speedup over naive decoding, pooled "
            "[95 % CI] and each run)")
    cells = "; ".join(f"{LABELS[d]} γ = {e['gamma']}: {speedup_cell(e)}, c = {e['c']:.3g}" for d, e in rows.items())
    return f"| {what} | {result['machine']['cpu_kind']} | {cells} | {commands(result)} |"


# ------------------------------------------------------------------------------------------------- CLI
def show(result: dict) -> str:
    """A result file's table and README row."""
    return f"{markdown_table(result)}\n\n{readme_row(result)}"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_file_arguments(parser, "a prompt or two, a few tokens: a smoke test, no intervals")
    parser.add_argument("--prompts", choices=tuple(PROMPT_SETS), default="chat",
                        help="the held-out chat requests (notebook 07) or the input-grounded ones (notebook 06)")
    args = parser.parse_args(argv)
    if file_command(args, "helpers.sidebyside", evaluate_run, show):
        return
    settings = {**DEFAULTS, **(QUICK if args.quick else {})}
    started = time.time()
    pair, head = load("eager")
    fp16 = self_draft(pair.expert)
    prompts_file = PROMPT_SETS[args.prompts][0]
    selection, evaluation = split(read_prompts(prompts_file))
    selection, evaluation = selection[:settings["select_prompts"]], evaluation[:settings["eval_prompts"]]
    result = {"command": "python -m helpers.sidebyside " + " ".join(sys.argv[1:] if argv is None else argv),
              "settings": {**settings, "runs": args.runs, "candidates": CANDIDATES, "prompts": args.prompts,
                           "prompts_file": prompts_file.name,
                           "chat_template": True, "eos": True, "temperature": 0.0},
              "machine": machine_info(pair.device), "selection_prompts": selection, "evaluation_prompts": evaluation}
    result["costs"] = costs(pair, head, fp16, encoded(pair, evaluation[:settings["cost_prompts"]]),
                            repeats=settings["cost_repeats"])
    candidates = {NAIVE: drafter_decoder(pair, head, fp16, "naive", 0, settings["select_tokens"])}
    candidates |= {config_name(d, g, 0.0): drafter_decoder(pair, head, fp16, d, g, settings["select_tokens"])
                   for d, gammas in CANDIDATES.items() for g in gammas}
    result["selection_runs"] = timed_runs(candidates, encoded(pair, selection), rounds=1)
    result["selected"] = select(result["selection_runs"])
    result["setup_seconds"] = time.time() - started
    start_runs(result, args.out, "helpers.sidebyside", args.runs)
    print(markdown_table(json.loads(args.out.read_text())))


if __name__ == "__main__":
    main()
