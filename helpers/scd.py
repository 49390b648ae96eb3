"""Notebook 08's measurements: speculative contrastive decoding (SCD) against plain contrastive decoding (CD) and
greedy decoding with the expert alone, on the held-out evaluation prompts (``data/eval_prompts.txt``, chat
template, EOS on).

``python -m helpers.scd --out data/results/scd-pocket-<cpu>.json`` writes one JSON with its command, settings and
machine, and every raw number:

* **acceptance** (counts, not timings): at temperature 1, α under the expert's p and under p_cd for the distilled
  draft and the draft head (notebook 07), α by draft depth and tokens per expert call (:func:`acceptance`);
* **speed** (this CPU only): greedy decoding, greedy CD and greedy SCD with the draft, timed with the tutorial's
  protocol (:mod:`helpers.protocol`: warm-up, an order shuffled anew every round, raw records with the other
  processes' load, intervals only from :data:`MIN_PROMPTS` prompts); the costs c and
  r(γ) of the cost model on every prompt (:func:`costs`). SCD runs with the draft and with the head as drafter
  (the amateur supplying the contrast).

:func:`summary` turns the raw file into what notebook 08 prints: time per token, paired speedups with 95 %
bootstrap intervals over prompts (none from fewer than :data:`MIN_PROMPTS`), the cost model's prediction, and the
quality comparison (CD's text against the expert's, paired by prompt).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from helpers.compare import Interval, mean_of, paired_difference
from helpers.data import EVAL_PROMPTS, read_prompts
from helpers.decoding import (
    Generation,
    SpecIteration,
    contrastive_sample,
    naive,
    probabilities,
    speculative,
    speculative_contrastive,
)
from helpers.heads import DraftHead, HeadStep, head_speculative, load_head
from helpers.machine import machine_info
from helpers.metrics import token_nll
from helpers.models import Pair, load_pair
from helpers.protocol import MIN_PROMPTS, depth_acceptance, round_counts, speedup, timed_runs
from helpers.timing import ForwardStep, cost_ratios, drafter_costs

CD = {"beta": 0.5, "alpha": 0.1}
"""O'Brien & Lewis's β and α_CD, for both CD and SCD."""


@torch.no_grad()
def round_rows(expert: torch.nn.Module, input_ids: torch.Tensor, it: SpecIteration, temperature: float) -> list[dict]:
    """The picture of one round (notebook 08) that started right after ``input_ids``: per drafted token, its
    probability under the expert's own p (one extra expert pass, for the picture only), under q (which drew it)
    and under p_cd (which judged it), and whether it was accepted, rejected or never judged."""
    draft = torch.tensor([it.draft], dtype=torch.long, device=input_ids.device)
    logits = expert(torch.cat([input_ids, draft], dim=1)).logits[0, input_ids.shape[1] - 1:-1]
    p = probabilities(logits, temperature)
    return [{"token": x, "p": float(p[i, x]), "q": it.q_draft[i], "p_cd": it.p_draft[i],
             "kind": "accepted" if i < it.n_accepted else "rejected" if i == it.n_accepted else "unused"}
            for i, x in enumerate(it.draft)]


def acceptance(pair: Pair, head: DraftHead, prompts: Sequence[torch.Tensor], *, gamma: int, max_new_tokens: int,
               seed: int = 0) -> dict[str, dict]:
    """α (mean β), α by depth and tokens per expert call at T = 1 for four drafter/target combinations: the
    draft or the head drafting, judged by the expert's p (notebooks 03, 07) or by p_cd (SCD)."""
    def decoders(ids: torch.Tensor, g: torch.Generator) -> dict[str, Callable[[], Generation]]:
        common = {"max_new_tokens": max_new_tokens, "gamma": gamma, "temperature": 1.0, "generator": g,
                  "eos_token_id": pair.eos_token_id}
        return {
            "draft, p": lambda: speculative(pair.expert, pair.amateur, ids, **common),
            "draft, p_cd": lambda: speculative_contrastive(pair.expert, pair.amateur, ids, **CD, **common),
            "head, p": lambda: head_speculative(pair.expert, head, ids, **common),
            "head, p_cd": lambda: speculative_contrastive(pair.expert, pair.amateur, ids, head=head, **CD, **common),
        }

    runs: dict[str, list[Generation]] = {}
    for i, ids in enumerate(prompts):
        for name, decode in decoders(ids, torch.Generator().manual_seed(seed * 1009 + i)).items():
            runs.setdefault(name, []).append(decode())
    return {name: {"alpha_per_prompt": [r.stats.mean_beta for r in rs],
                   "alpha_by_depth": depth_acceptance(c for r in rs for c in round_counts(r)),
                   "tokens_per_call": sum(len(r.new_token_ids) for r in rs) / sum(r.stats.expert_calls for r in rs)}
            for name, rs in runs.items()}


def finite(values: Sequence[float]) -> list[float]:
    """The values that are numbers: a run that ended before drafting anything (EOS first) has no α (NaN)."""
    return [v for v in values if not math.isnan(v)]


def paired_alpha(acceptance: dict[str, dict], a: str, b: str) -> Interval:
    """α(a) − α(b), prompt by prompt, with its 95 % interval over prompts (prompts where either run drafted nothing
    are left out)."""
    pairs = zip(acceptance[a]["alpha_per_prompt"], acceptance[b]["alpha_per_prompt"], strict=True)
    return mean_of([x - y for x, y in pairs if not (math.isnan(x) or math.isnan(y))])


def acceptance_summary(acceptance: dict[str, dict]) -> tuple[dict[str, Interval], dict[str, Interval]]:
    """The mean α of every drafter/target combination with its 95 % interval over prompts, and the paired
    differences notebook 08 reads: each drafter's drop α(p) − α(p_cd), the head minus the draft under p_cd, and the
    head's drop minus the draft's."""
    alphas = {name: mean_of(finite(entry["alpha_per_prompt"])) for name, entry in acceptance.items()}
    def drop(d: str) -> list[float]:
        return [a - b for a, b in zip(acceptance[f"{d}, p"]["alpha_per_prompt"],
                                      acceptance[f"{d}, p_cd"]["alpha_per_prompt"], strict=True)]

    return alphas, {"draft: p − p_cd": paired_alpha(acceptance, "draft, p", "draft, p_cd"),
                    "head: p − p_cd": paired_alpha(acceptance, "head, p", "head, p_cd"),
                    "p_cd: head − draft": paired_alpha(acceptance, "head, p_cd", "draft, p_cd"),
                    "drop: head − draft": mean_of(finite([h - d for h, d in zip(drop("head"), drop("draft"),
                                                                                  strict=True)]))}


def costs(pair: Pair, prompts: Sequence[torch.Tensor], gamma: int, repeats: int) -> dict[str, list[float]]:
    """c (draft step / expert step) and r(γ) (an expert pass over γ + 1 tokens / an expert step), per prompt."""
    cs, rs = [], []
    for ids in prompts:
        c, r = cost_ratios(pair.expert, pair.amateur, ids, gammas=[gamma], repeats=repeats)
        cs.append(c)
        rs.append(r[gamma])
    return {"c": cs, "r": rs}


def head_costs(pair: Pair, head: DraftHead, prompts: Sequence[torch.Tensor], gamma: int,
               repeats: int) -> dict[str, list[float]]:
    """The cost model of SCD with the head drafting, per prompt, each over an expert step and timed together
    (interleaved): ``c_head`` (a head step), ``r`` (an expert pass over γ + 1 tokens), ``contrast_pass`` (the
    amateur's one pass over the γ + 1 judged positions, which supplies the contrast) and ``c`` (an amateur step,
    for plain CD's cost 1 + c). A round costs γ·c_head + r(γ) + contrast_pass expert steps."""
    out: dict[str, list[float]] = {"c_head": [], "r": [], "contrast_pass": [], "c": []}
    for ids in prompts:
        steps = {"head": HeadStep(head, pair.expert, ids), "contrast": ForwardStep(pair.amateur, ids, gamma + 1),
                 "amateur": ForwardStep(pair.amateur, ids, 1)}
        c, r = drafter_costs(pair.expert, ids, steps, [gamma], repeats)
        for key, value in (("c_head", c["head"]), ("r", r[gamma]), ("contrast_pass", c["contrast"]),
                           ("c", c["amateur"])):
            out[key].append(value)
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--prompts", type=int, default=MIN_PROMPTS, help="every other evaluation prompt, this many")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--acceptance-tokens", type=int, default=64)
    parser.add_argument("--gamma", type=int, default=2, help="the amateur's γ in the timed runs")
    parser.add_argument("--head-gamma", type=int, default=3,
                        help="the head's γ in the timed runs, and both drafters' γ in the acceptance runs")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--temperature", type=float, default=0.0,
                        help="of the timed runs (0: greedy; > 0: every method samples, seeded per run, and the "
                             "acceptance runs, already at T = 1 in the greedy file, are skipped)")
    parser.add_argument("--cost-repeats", type=int, default=5)
    parser.add_argument("--only-costs", action="store_true",
                        help="re-measure only c and r(γ) into an existing --out file (on an otherwise idle machine)")
    parser.add_argument("--head-costs", action="store_true",
                        help="measure the head's round costs (head_costs) at --head-gamma into an existing --out file")
    parser.add_argument("--rescore", action="store_true",
                        help="only add the expert's per-token NLL of the greedy and CD texts to an existing --out file")
    parser.add_argument("--retime", type=lambda text: [int(i) for i in text.split(",")], default=None,
                        help="re-time these prompts (e.g. 0,1) of an existing --out file, keeping the replaced records "
                             "under 'disturbed_runs' (for prompts another process disturbed)")
    args = parser.parse_args(argv)
    command = "python -m helpers.scd " + " ".join(sys.argv[1:] if argv is None else argv)
    pair, started = load_pair("pocket"), time.time()
    head = load_head(pair.expert)
    texts = read_prompts(EVAL_PROMPTS)[::2][:args.prompts]
    prompts = [pair.encode_chat(t) for t in texts]
    if args.rescore:
        result = json.loads(args.out.read_text())
        result["nll"] = likelihoods(pair, prompts, result["runs"])
        result["rescore_command"], result["rescore_machine"] = command, machine_info(pair.device)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        return
    if args.head_costs:
        result = json.loads(args.out.read_text())
        result["head_costs"] = head_costs(pair, head, prompts, result["settings"]["head_gamma"], args.cost_repeats)
        result["head_costs_command"], result["head_costs_machine"] = command, machine_info(pair.device)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        return
    if args.only_costs:
        result = json.loads(args.out.read_text())
        result["costs"] = costs(pair, prompts, result["settings"]["gamma"], args.cost_repeats)
        result["costs_command"] = command
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        return
    if args.temperature < 0:
        parser.error(f"--temperature must be >= 0, got {args.temperature}")
    n, eos, t = args.max_new_tokens, pair.eos_token_id, args.temperature

    def seeded(seed: int) -> dict:  # the keyword arguments every method shares; a generator only where it samples
        generator = torch.Generator().manual_seed(seed) if t > 0 else None
        return {"max_new_tokens": n, "temperature": t, "eos_token_id": eos, "generator": generator}

    configs = {
        "greedy": lambda ids, seed: naive(pair.expert, ids, **seeded(seed)),
        "CD": lambda ids, seed: contrastive_sample(pair.expert, pair.amateur, ids, **seeded(seed), **CD),
        "SCD": lambda ids, seed: speculative_contrastive(pair.expert, pair.amateur, ids, gamma=args.gamma,
                                                         **seeded(seed), **CD),
        "SCD, head": lambda ids, seed: speculative_contrastive(pair.expert, pair.amateur, ids, gamma=args.head_gamma,
                                                               head=head, **seeded(seed), **CD),
    }
    if args.retime is not None:
        result = json.loads(args.out.read_text())
        redone = [{**rec, "prompt": i} for i in args.retime
                  for rec in timed_runs(configs, [prompts[i]], rounds=result["settings"]["rounds"], seed=i)]
        result["disturbed_runs"] = [rec for rec in result["runs"] if rec["prompt"] in args.retime]
        result["runs"] = [rec for rec in result["runs"] if rec["prompt"] not in args.retime] + redone
        result["retime_command"] = command
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        print(json.dumps(summary(result), indent=1, default=str))
        return
    result = {
        "command": command,
        "settings": {**vars(args), "out": str(args.out), "cd": CD, "prompts_file": EVAL_PROMPTS.name,
                     "prompt_selection": "every other line, from the first", "chat_template": True, "eos": True},
        "machine": machine_info(pair.device),
        "prompts": texts,
    }
    if t == 0:
        result["acceptance"] = acceptance(pair, head, prompts, gamma=args.head_gamma,
                                          max_new_tokens=args.acceptance_tokens)
    result["costs"] = costs(pair, prompts, args.gamma, args.cost_repeats)
    result["runs"] = timed_runs(configs, prompts, rounds=args.rounds)
    result["decoded"] = {name: [pair.decode(next(r["tokens"] for r in result["runs"]
                                                 if r["prompt"] == i and r["config"] == name and r["round"] == 0))
                                for i in range(len(prompts))] for name in configs}
    result["nll"] = likelihoods(pair, prompts, result["runs"])
    result["seconds"] = time.time() - started
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    if len(prompts) >= MIN_PROMPTS:
        print(json.dumps(summary(result), indent=1, default=str))
    else:
        print(f"{args.out} written; no summary from fewer than {MIN_PROMPTS} prompts", file=sys.stderr)


def likelihoods(pair: Pair, prompts: Sequence[torch.Tensor], runs: Sequence[dict]) -> dict[str, list[list[float]]]:
    """The expert's per-token NLL of greedy decoding's and CD's text on every prompt (from the timed runs' tokens),
    for the quality comparison at equal length (:func:`summary`)."""
    def tokens(i: int, name: str) -> list[int]:
        return next(r["tokens"] for r in runs if r["prompt"] == i and r["config"] == name)

    return {name: [token_nll(pair.expert, ids, tokens(i, name)) for i, ids in enumerate(prompts)]
            for name in ("greedy", "CD")}


def summary(result: dict) -> dict:
    """What notebook 08 prints, from a result file: speedups with intervals, the cost model, identity, quality."""
    runs, cost = result["runs"], result["costs"]
    first = {(r["prompt"], r["config"]): r for r in runs if r["round"] == 0}
    n_prompts = len(result["prompts"])
    identical = {name: sum(first[i, name]["tokens"] == first[i, "CD"]["tokens"] for i in range(n_prompts))
                 for name in ("SCD", "SCD, head")}
    scd = [r for r in runs if r["config"] == "SCD"]
    per_call = sum(len(r["tokens"]) for r in scd) / sum(r["expert_calls"] for r in scd)
    c, r_gamma, gamma = float(np.median(cost["c"])), float(np.median(cost["r"])), result["settings"]["gamma"]
    round_cost = gamma * c + r_gamma + c  # γ draft steps, one verification pass, the extra amateur step
    texts = [{"prompt": i, "method": name, "text": result["decoded"][name][i], "nll": result["nll"][name][i]}
             for name in ("CD", "greedy") for i in range(n_prompts)]  # compared as notebook 04 compares methods
    quality = {metric: paired_difference(texts, "CD", "greedy", metric, fixed_length=True)
               for metric in ("diversity", "rep-2", "distinct-2", "mean NLL")}
    predicted = {"SCD vs greedy": per_call / round_cost, "SCD vs CD": per_call * (1 + c) / round_cost,
                 "CD vs greedy": 1 / (1 + c)}
    head = None
    if "head_costs" in result:  # measured later, in its own interleaved run: c there is that run's
        head = {key: float(np.median(values)) for key, values in result["head_costs"].items()}
        head["gamma"] = result["settings"]["head_gamma"]
        head_runs = [r for r in runs if r["config"] == "SCD, head"]
        head["tokens_per_call"] = sum(len(r["tokens"]) for r in head_runs) / sum(r["expert_calls"] for r in head_runs)
        head_round = head["gamma"] * head["c_head"] + head["r"] + head["contrast_pass"]
        predicted |= {"SCD, head vs greedy": head["tokens_per_call"] / head_round,
                      "SCD, head vs CD": head["tokens_per_call"] * (1 + head["c"]) / head_round}
    return {
        "prompts": n_prompts,
        "scd_equals_cd": identical["SCD"], "scd_head_equals_cd": identical["SCD, head"],
        "speedup": {"SCD vs CD": speedup(runs, "CD", "SCD"), "SCD vs greedy": speedup(runs, "greedy", "SCD"),
                    "CD vs greedy": speedup(runs, "greedy", "CD"), "SCD, head vs CD": speedup(runs, "CD", "SCD, head"),
                    "SCD, head vs greedy": speedup(runs, "greedy", "SCD, head")},
        "tokens_per_call": per_call, "c": c, "r": r_gamma, "head": head,
        "predicted": predicted,
        "quality": quality,
    }


def speed_table(result: dict) -> str:
    """Notebook 08's table: every comparison's measured speedup with its interval, and the cost model's explained
    speedup where the file holds the costs it needs."""
    s = summary(result)
    st = result["settings"]
    t = st.get("temperature", 0.0)  # files recorded before --temperature existed are greedy
    at = "" if t == 0 else f", T = {t:g}"
    labels = {"SCD": f"SCD (draft, γ = {st['gamma']}{at})", "SCD, head": f"SCD (head, γ = {st['head_gamma']}{at})",
              "CD": f"CD (β_CD = {st['cd']['beta']}{at})",
              "greedy": "greedy" if t == 0 else f"naive sampling (T = {t:g})"}
    rows = ["| comparison | measured speedup [95 % interval] | explained by the cost model |", "|---|---|---:|"]
    for name, interval in s["speedup"].items():
        fast, slow = name.split(" vs ")
        explained = s["predicted"].get(name)
        rows.append(f"| {labels[fast]} vs {labels[slow]} | {interval.mean:.2f}× [{interval.low:.2f}, "
                    f"{interval.high:.2f}] | " + (f"{explained:.2f}× |" if explained is not None else "– |"))
    return "\n".join(rows)


def costs_text(result: dict) -> str:
    """The costs behind :func:`speed_table`'s explained column, a line per drafter (the head's where measured)."""
    s, st = summary(result), result["settings"]
    text = (f"{s['tokens_per_call']:.2f} tokens per expert call (all SCD tokens / all its expert calls); c = "
            f"{s['c']:.3f}, r({st['gamma']}) = {s['r']:.2f} (medians over the requests)")
    if s["head"]:  # the head's round cost, timed later in its own interleaved run on the same requests
        h, gh = s["head"], st["head_gamma"]
        text += (f"\nhead rows: {h['tokens_per_call']:.2f} tokens per expert call; c_head = {h['c_head']:.3f}, "
                 f"r({gh}) = {h['r']:.2f}, the amateur's contrast pass over {gh + 1} positions "
                 f"{h['contrast_pass']:.2f}, c = {h['c']:.3f} (medians; {result['head_costs_machine']['cpu_kind']}, "
                 f"`{result['head_costs_command']}`)")
    return text


if __name__ == "__main__":
    main()
