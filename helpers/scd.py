"""Notebook 08's measurements: speculative contrastive decoding (SCD) against plain contrastive decoding (CD) and
greedy decoding with the expert alone, on the held-out evaluation prompts (``data/eval_prompts.txt``, chat
template, EOS on).

``python -m helpers.scd --out data/results/scd-pocket-<cpu>.json`` writes one JSON with its command, settings and
machine, and every raw number:

* **acceptance** (counts, not timings): at temperature 1, α under the expert's p and under p_cd for the distilled
  draft and the draft head (notebook 07), α by draft depth and tokens per expert call (:func:`acceptance`);
* **selection** (:func:`select`, :func:`chosen`): each drafter's γ, the fastest of :data:`GAMMAS` against plain CD
  on the selection requests (0-based indices 1, 3, 5, … of the evaluation prompts, none of them
  timed), one timing round, unless ``--gamma`` and
  ``--head-gamma`` fix them;
* **speed** (this CPU only): greedy decoding, greedy CD and greedy SCD with the draft and with the head as drafter
  (the amateur supplying the contrast), each SCD at its selected γ, timed with the tutorial's protocol
  (:mod:`helpers.protocol`: warm-up, an order shuffled anew every round, raw records with the other processes' load,
  intervals only from :data:`MIN_PROMPTS` prompts); the costs of the cost model on every prompt: c and r(γ)
  (:func:`costs`) and the head's round costs (:func:`head_costs`).

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
from helpers.protocol import (
    MIN_PROMPTS,
    Decoder,
    depth_acceptance,
    mean_speedup,
    round_counts,
    speedup,
    timed_runs,
)
from helpers.speed import interval_text, split
from helpers.timing import ForwardStep, cost_ratios, drafter_costs

CD = {"beta": 0.5, "alpha": 0.1}
"""O'Brien & Lewis's β and α_CD, for both CD and SCD."""
ACCEPTANCE_TEMPERATURE = 1.0
"""The temperature of :func:`acceptance`'s sampled runs (notebook 08 prints it with their table)."""


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
        common = {"max_new_tokens": max_new_tokens, "gamma": gamma, "temperature": ACCEPTANCE_TEMPERATURE,
                  "generator": g, "eos_token_id": pair.eos_token_id}
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


GAMMAS = (1, 2, 3, 4, 5, 6)
"""The draft lengths the selection tries, for each drafter (helpers.speed's fixed lengths)."""
DRAFTERS = {"SCD": False, "SCD, head": True}
"""The two SCD configurations and whether the draft head of notebook 07 drafts in it (else the amateur drafts)."""
QUALITY_METRICS = ("diversity", "rep-2", "distinct-2", "mean NLL")
"""Notebook 04's metrics, each at equal length per request."""


def decoder(pair: Pair, head: DraftHead | None, method: str, *, gamma: int = 0, max_new_tokens: int,
            temperature: float) -> Decoder:
    """One timed configuration: ``"greedy"`` (the expert alone; naive sampling at T > 0), ``"CD"`` (token by token
    from p_cd) or ``"SCD"`` (drafting γ tokens with ``head`` where given, else with the amateur), seeded per run
    where it samples."""
    def decode(ids: torch.Tensor, seed: int) -> Generation:
        generator = torch.Generator().manual_seed(seed) if temperature > 0 else None
        common = {"max_new_tokens": max_new_tokens, "temperature": temperature, "eos_token_id": pair.eos_token_id,
                  "generator": generator}
        if method == "greedy":
            return naive(pair.expert, ids, **common)
        if method == "CD":
            return contrastive_sample(pair.expert, pair.amateur, ids, **common, **CD)
        return speculative_contrastive(pair.expert, pair.amateur, ids, gamma=gamma, head=head, **common, **CD)

    if method not in ("greedy", "CD", "SCD"):
        raise ValueError(f"method must be 'greedy', 'CD' or 'SCD', got {method!r}")
    return decode


def select(pair: Pair, head: DraftHead, prompts: Sequence[torch.Tensor], *, max_new_tokens: int,
           temperature: float) -> list[dict]:
    """The selection runs: plain CD and SCD with each drafter at every γ of :data:`GAMMAS`, one timing round on
    ``prompts`` (the selection requests, none of which is evaluated); :func:`chosen` reads them."""
    configs = {"CD": decoder(pair, head, "CD", max_new_tokens=max_new_tokens, temperature=temperature)}
    for name, by_head in DRAFTERS.items():
        configs |= {f"{name}, γ = {g}": decoder(pair, head if by_head else None, "SCD", gamma=g,
                                                max_new_tokens=max_new_tokens, temperature=temperature)
                    for g in GAMMAS}
    return timed_runs(configs, prompts, rounds=1)


def chosen(records: Sequence[dict]) -> dict[str, int]:
    """Per drafter, the γ with the highest mean speedup over plain CD in the selection runs (CD's cost does not
    depend on γ, so this is the fastest γ per token, request by request)."""
    return {name: max(GAMMAS, key=lambda g, name=name: mean_speedup(records, "CD", f"{name}, γ = {g}"))
            for name in DRAFTERS}


def execution_path(pair: Pair) -> str:
    """How the pair runs: ``"fp32 eager"`` on a CPU (:func:`helpers.models.load_pair`'s default there)."""
    dtype = str(pair.expert.dtype).removeprefix("torch.").replace("float", "fp")
    return f"{dtype} eager" + ("" if pair.device.type == "cpu" else f" on {pair.device.type}")


def path_of(result: dict) -> str:
    """The execution path a result file was timed on; files that predate recording it ran ``load_pair``'s default,
    which on a CPU is fp32 eager."""
    if "path" in result["settings"]:
        return result["settings"]["path"]
    if result["machine"]["device"] != "cpu":
        raise ValueError("this file predates recording its execution path and was not run on a CPU: measure it anew")
    return "fp32 eager"


def selection_table(result: dict) -> str:
    """Notebook 08's selection table: per γ, each drafter's mean speedup over CD on the selection requests (no
    interval: fewer than :data:`MIN_PROMPTS` requests, one timing round), the chosen γ in bold."""
    records, picked = result["selection_runs"], result["selected"]
    rows = ["| γ | " + " | ".join(f"{name} vs CD (mean over requests)" for name in DRAFTERS) + " |",
            "|---:|" + "---:|" * len(DRAFTERS)]
    for g in GAMMAS:
        cells = [f"{mean_speedup(records, 'CD', f'{name}, γ = {g}'):.2f}×" for name in DRAFTERS]
        cells = [f"**{c}**" if picked[name] == g else c for c, name in zip(cells, DRAFTERS, strict=True)]
        rows.append(f"| {g} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--prompts", type=int, default=MIN_PROMPTS, help="every other evaluation prompt, this many")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--acceptance-tokens", type=int, default=64)
    parser.add_argument("--acceptance-gamma", type=int, default=3, help="both drafters' γ in the acceptance runs")
    parser.add_argument("--gamma", type=int, default=None,
                        help="the amateur's γ in the timed runs (default: selected on the selection requests)")
    parser.add_argument("--head-gamma", type=int, default=None,
                        help="the head's γ in the timed runs (default: selected on the selection requests)")
    parser.add_argument("--select-prompts", type=int, default=10,
                        help="selection requests (0-based indices 1, 3, 5, …)")
    parser.add_argument("--select-tokens", type=int, default=32, help="new tokens per selection run")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--temperature", type=float, default=0.0,
                        help="of the selection and timed runs (0: greedy; > 0: every method samples, seeded per "
                             "run, and the acceptance runs, already at T = 1 in the greedy file, are skipped)")
    parser.add_argument("--cost-repeats", type=int, default=5)
    parser.add_argument("--retime", type=lambda text: [int(i) for i in text.split(",")], default=None,
                        help="re-time these prompts (e.g. 0,1) of an existing --out file, keeping the replaced records "
                             "under 'disturbed_runs' (for prompts another process disturbed)")
    args = parser.parse_args(argv)
    if args.temperature < 0:
        parser.error(f"--temperature must be >= 0, got {args.temperature}")
    for name in ("gamma", "head_gamma", "acceptance_gamma"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    command = "python -m helpers.scd " + " ".join(sys.argv[1:] if argv is None else argv)
    pair, started = load_pair("pocket"), time.time()
    head = load_head(pair.expert)
    selection_texts, texts = split(read_prompts(EVAL_PROMPTS))
    selection_texts, texts = selection_texts[:args.select_prompts], texts[:args.prompts]
    prompts = [pair.encode_chat(t) for t in texts]

    def configs(gammas: dict[str, int], n: int, t: float) -> dict[str, Decoder]:
        return {"greedy": decoder(pair, head, "greedy", max_new_tokens=n, temperature=t),
                "CD": decoder(pair, head, "CD", max_new_tokens=n, temperature=t)} | {
            name: decoder(pair, head if by_head else None, "SCD", gamma=gammas[name], max_new_tokens=n, temperature=t)
            for name, by_head in DRAFTERS.items()}

    if args.retime is not None:
        result = json.loads(args.out.read_text())
        st = result["settings"]
        timed = configs({"SCD": st["gamma"], "SCD, head": st["head_gamma"]}, st["max_new_tokens"],
                        st["temperature"])
        redone = [{**rec, "prompt": i} for i in args.retime
                  for rec in timed_runs(timed, [prompts[i]], rounds=st["rounds"], seed=i)]
        result["disturbed_runs"] = [rec for rec in result["runs"] if rec["prompt"] in args.retime]
        result["runs"] = [rec for rec in result["runs"] if rec["prompt"] not in args.retime] + redone
        result["retime_command"] = command
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        print(json.dumps(summary(result), indent=1, default=str))
        return
    result: dict = {"command": command, "machine": machine_info(pair.device), "prompts": texts}
    if args.gamma is None or args.head_gamma is None:
        result["selection_prompts"] = selection_texts
        result["selection_runs"] = select(pair, head, [pair.encode_chat(t) for t in selection_texts],
                                          max_new_tokens=args.select_tokens, temperature=args.temperature)
        result["selected"] = chosen(result["selection_runs"])
        args.gamma = args.gamma or result["selected"]["SCD"]
        args.head_gamma = args.head_gamma or result["selected"]["SCD, head"]
    result["settings"] = {**vars(args), "out": str(args.out), "cd": CD, "prompts_file": EVAL_PROMPTS.name,
                          "path": execution_path(pair), "prompt_selection": "every other line, from the first",
                          "chat_template": True, "eos": True}
    if args.temperature == 0:
        result["acceptance"] = acceptance(pair, head, prompts, gamma=args.acceptance_gamma,
                                          max_new_tokens=args.acceptance_tokens)
    result["costs"] = costs(pair, prompts, args.gamma, args.cost_repeats)
    result["head_costs"] = head_costs(pair, head, prompts, args.head_gamma, args.cost_repeats)
    result["runs"] = timed_runs(configs({"SCD": args.gamma, "SCD, head": args.head_gamma}, args.max_new_tokens,
                                        args.temperature), prompts, rounds=args.rounds)
    result["decoded"] = {name: [pair.decode(next(r["tokens"] for r in result["runs"]
                                                 if r["prompt"] == i and r["config"] == name and r["round"] == 0))
                                for i in range(len(prompts))] for name in ("greedy", "CD", *DRAFTERS)}
    result["nll"] = likelihoods(pair, prompts, result["runs"])
    result["seconds"] = time.time() - started
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    if len(prompts) >= MIN_PROMPTS:
        print(json.dumps(summary(result), indent=1, default=str))
    else:
        print(f"{args.out} written; no summary from fewer than {MIN_PROMPTS} prompts", file=sys.stderr)


def likelihoods(pair: Pair, prompts: Sequence[torch.Tensor], runs: Sequence[dict]) -> dict[str, list[list[float]]]:
    """The expert's per-token NLL of every method's text on every prompt (from the timed runs' first timing round), for
    the quality comparisons at equal length (:func:`summary`)."""
    def tokens(i: int, name: str) -> list[int]:
        return next(r["tokens"] for r in runs if r["prompt"] == i and r["config"] == name and r["round"] == 0)

    return {name: [token_nll(pair.expert, ids, tokens(i, name)) for i, ids in enumerate(prompts)]
            for name in ("greedy", "CD", *DRAFTERS)}


def summary(result: dict) -> dict:
    """What notebook 08 prints, from a result file: speedups with intervals, the cost model, identity, quality (CD's
    text against the expert's, paired by prompt at equal length) and, for a sampled file, each SCD's text against
    CD's (``same_distribution``: differences whose intervals should cover 0, since SCD samples from CD's p_cd)."""
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
             for name in ("greedy", "CD", *DRAFTERS) for i in range(n_prompts)]  # compared as notebook 04 does

    def compared(a: str, b: str) -> dict[str, Interval]:
        return {metric: paired_difference(texts, a, b, metric, fixed_length=True) for metric in QUALITY_METRICS}

    sampled = result["settings"].get("temperature", 0.0) > 0  # files recorded before --temperature are greedy
    explained = {"SCD vs greedy": per_call / round_cost, "SCD vs CD": per_call * (1 + c) / round_cost,
                 "CD vs greedy": 1 / (1 + c)}
    head = {key: float(np.median(values)) for key, values in result["head_costs"].items()}
    head["gamma"] = result["settings"]["head_gamma"]
    head_runs = [r for r in runs if r["config"] == "SCD, head"]
    head["tokens_per_call"] = sum(len(r["tokens"]) for r in head_runs) / sum(r["expert_calls"] for r in head_runs)
    head_round = head["gamma"] * head["c_head"] + head["r"] + head["contrast_pass"]
    explained |= {"SCD, head vs greedy": head["tokens_per_call"] / head_round,
                  "SCD, head vs CD": head["tokens_per_call"] * (1 + head["c"]) / head_round}
    return {
        "prompts": n_prompts,
        "scd_equals_cd": identical["SCD"], "scd_head_equals_cd": identical["SCD, head"],
        "speedup": {"SCD vs CD": speedup(runs, "CD", "SCD"), "SCD vs greedy": speedup(runs, "greedy", "SCD"),
                    "CD vs greedy": speedup(runs, "greedy", "CD"), "SCD, head vs CD": speedup(runs, "CD", "SCD, head"),
                    "SCD, head vs greedy": speedup(runs, "greedy", "SCD, head")},
        "tokens_per_call": per_call, "c": c, "r": r_gamma, "head": head,
        "explained": explained,
        "quality": compared("CD", "greedy"),
        "same_distribution": {name: compared(name, "CD") for name in DRAFTERS} if sampled else None,
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
        explained = s["explained"].get(name)
        rows.append(f"| {labels[fast]} vs {labels[slow]} | {interval.mean:.2f}× [{interval.low:.2f}, "
                    f"{interval.high:.2f}] | " + (f"{explained:.2f}× |" if explained is not None else "– |"))
    return "\n".join(rows)


def costs_text(result: dict) -> str:
    """The costs behind :func:`speed_table`'s explained column, a line per drafter (the head's where measured)."""
    s, st = summary(result), result["settings"]
    text = (f"{s['tokens_per_call']:.2f} tokens per expert call (all SCD tokens / all its expert calls); c = "
            f"{s['c']:.3f}, r({st['gamma']}) = {s['r']:.2f} (medians over the requests)")
    h, gh = s["head"], st["head_gamma"]  # the head's round cost, timed in its own interleaved run
    text += (f"\nhead rows: {h['tokens_per_call']:.2f} tokens per expert call; c_head = {h['c_head']:.3f}, "
             f"r({gh}) = {h['r']:.2f}, the amateur's contrast pass over {gh + 1} positions "
             f"{h['contrast_pass']:.2f}, c = {h['c']:.3f} (medians over the requests)")
    return text


def readme_row(result: dict) -> str:
    """The README's row for this result file (a test checks that the README holds it verbatim): every measured
    speedup with its interval, what the cost model explains, the selected γ, and the command."""
    s, st = summary(result), result["settings"]
    t = st.get("temperature", 0.0)
    alone = "greedy decoding" if t == 0 else "naive sampling"
    sp, explained = s["speedup"], s["explained"]

    def versus(name: str) -> str:
        return (f"{interval_text(sp[name + ' vs CD'])} of CD's speed and {interval_text(sp[name + ' vs greedy'])} "
                f"of {alone}'s (explained: {explained[name + ' vs CD']:.2f}×, {explained[name + ' vs greedy']:.2f}×)")

    same = f"{s['scd_equals_cd']} and {s['scd_head_equals_cd']} of {s['prompts']}"
    result_text = (f"SCD with the amateur drafting (γ = {st['gamma']}) {versus('SCD')}; with the draft head drafting "
                   f"(γ = {st['head_gamma']}) {versus('SCD, head')}; CD itself {interval_text(sp['CD vs greedy'])} "
                   f"of {alone}'s (explained: {explained['CD vs greedy']:.2f}×); {s['tokens_per_call']:.2f} and "
                   f"{s['head']['tokens_per_call']:.2f} tokens per expert call; SCD wrote CD's text on {same} "
                   + ("requests" if t == 0 else "requests (the same seed, drawn in another order)"))
    if "acceptance" in result:
        alphas, _ = acceptance_summary(result["acceptance"])
        result_text += (f". Sampled at T = 1 (γ = {st['acceptance_gamma']}, up to {st['acceptance_tokens']} "
                        f"tokens): α under p_cd {alphas['draft, p_cd'].mean:.3f} for the amateur's drafts and "
                        f"{alphas['head, p_cd'].mean:.3f} for the head's (under p: {alphas['draft, p'].mean:.3f} "
                        f"and {alphas['head, p'].mean:.3f})")
    selection = (f"γ selected per drafter on {len(result['selection_prompts'])} other requests "
                 f"({st['select_tokens']} tokens, 1 timing round)" if "selected" in result
                 else "γ fixed by the command")
    what = (f"**speculative contrastive decoding** (notebook 08; β_CD = {st['cd']['beta']}, α_CD = "
            f"{st['cd']['alpha']}; {s['prompts']} held-out chat requests, chat template, EOS on, up to "
            f"{st['max_new_tokens']} tokens, {'greedy' if t == 0 else f'T = {t:g}, each run seeded'}, "
            f"{st['rounds']} shuffled timing rounds, one run; {selection}; mean over requests of the per-request "
            f"speedups [95 % CI])")
    command = " then ".join(f"`{c}`" for c in [result["command"], result.get("retime_command")] if c)
    return f"| {what} | {result['machine']['cpu_kind']} | {result_text} | {command} |"


if __name__ == "__main__":
    main()
