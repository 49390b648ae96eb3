"""The one speed protocol of the tutorial: every "faster" or "slower" in README and notebooks comes through here.

1. **Warm-up.** Every configuration runs once, untimed, before anything is timed.
2. **Interleaving.** For every prompt, ``rounds`` timing rounds; in each every configuration runs once, in an order
   shuffled anew, so that drifts of the machine (clock, other processes) hit all of them alike.
3. **Raw records.** One per timed run (:func:`timed_runs`): seconds, tokens, calls, every drafting round's draft
   length, kept tokens and seconds (for naive decoding every step's seconds), its position in the timing round, the
   seed, and how many cores other processes kept busy just before the prompt
   (:func:`helpers.timing.others_busy_cores`, not the load average, which counts us too).
4. **Paired intervals.** Per prompt, the median over timing rounds of seconds per token; the speedup of ``fast`` over
   ``slow`` is the mean over prompts of their ratio, with a 95 % bootstrap interval over prompts
   (:func:`speedup`), refused below :data:`MIN_PROMPTS` prompts.
5. **Several runs.** Independent runs (separate processes) are reported one by one and pooled, with their spread
   (:func:`across_runs`), so that a reader sees the run-to-run spread next to the within-run interval.

A protocol command (:mod:`helpers.speed`, :mod:`helpers.sidebyside`) writes one result file per CPU kind: its setup
phases first, then every run appended by :func:`append_run` in a process of its own (:func:`start_runs`); the shared
options (``--out``, ``--runs``, ``--quick``, ``--show``, ``--add-run``) are :func:`add_file_arguments`'s.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np
import torch

from helpers.compare import Interval, mean_of
from helpers.decoding import Generation, SpecIteration
from helpers.machine import machine_info
from helpers.timing import others_busy_cores

MIN_PROMPTS = 20
"""The fewest prompts an interval is printed from."""

Decoder = Callable[[torch.Tensor, int], Generation]
"""One configuration: ``decode(input_ids, seed)`` (the seed feeds a sampler's generator; greedy ignores it)."""


def round_counts(run: Generation) -> list[list[int]]:
    """``[d, k]`` for every drafting round of a run: d tokens drafted, k of them kept (empty for naive decoding)."""
    return [[len(it.draft), it.n_accepted] for it in run.trace if isinstance(it, SpecIteration)]


def depth_acceptance(rounds: Iterable[Sequence[int]]) -> list[float]:
    """α_k from ``[d, k]`` round counts: of the draft tokens judged at depth k (the k-th token of a round's draft),
    the share accepted. A token is judged when every token before it in its draft was accepted."""
    judged: dict[int, int] = {}
    accepted: dict[int, int] = {}
    for drafted, kept in rounds:
        for depth in range(1, min(drafted, kept + 1) + 1):
            judged[depth] = judged.get(depth, 0) + 1
            accepted[depth] = accepted.get(depth, 0) + (depth <= kept)
    return [accepted[k] / judged[k] for k in sorted(judged)]


def record(run: Generation) -> dict:
    """What a record keeps of one generation besides its time."""
    return {"tokens": run.new_token_ids, "expert_calls": run.stats.expert_calls,
            "amateur_calls": run.stats.amateur_calls, "head_calls": run.stats.head_calls,
            "alpha": run.stats.mean_beta, "rounds": round_counts(run),
            "round_seconds": [round(t, 6) for t in run.stats.round_seconds]}


def timed_runs(configs: dict[str, Decoder], prompts: Sequence[torch.Tensor], *, rounds: int, seed: int = 0,
               progress: bool = True) -> list[dict]:
    """Steps 1-3 of the protocol: one warm-up run of every configuration on the first prompt, then every
    configuration once per prompt and round in an order shuffled for every round; one record per timed run."""
    if rounds < 1 or not prompts or not configs:
        raise ValueError(f"need rounds >= 1, prompts and configurations; got rounds={rounds}, {len(prompts)} prompts, "
                         f"{len(configs)} configurations")
    rng = random.Random(seed)
    for decode in configs.values():
        decode(prompts[0], seed)
    records = []
    for i, ids in enumerate(prompts):
        busy = others_busy_cores(0.3)
        for round_ in range(rounds):
            order = list(configs)
            rng.shuffle(order)
            run_seed = rng.randrange(2**31)
            for position, name in enumerate(order):
                start = time.perf_counter()
                run = configs[name](ids, run_seed)
                seconds = time.perf_counter() - start
                records.append({"prompt": i, "round": round_, "position": position, "config": name,
                                "seconds": seconds, "seed": run_seed, "others_busy_cores": busy, **record(run)})
        if progress:
            print(f"prompt {i + 1}/{len(prompts)} done", file=sys.stderr, flush=True)
    return records


def seconds_per_token(records: Sequence[dict], config: str) -> dict[int, float]:
    """Each prompt's median over rounds of seconds per generated token, for one configuration."""
    by_prompt: dict[int, list[float]] = {}
    for rec in records:
        if rec["config"] == config:
            by_prompt.setdefault(rec["prompt"], []).append(rec["seconds"] / max(1, len(rec["tokens"])))
    return {i: float(np.median(s)) for i, s in by_prompt.items()}


def ratios(records: Sequence[dict], slow: str, fast: str) -> dict[int, float]:
    """Per prompt: time per token of ``slow`` / time per token of ``fast`` (above 1: ``fast`` is faster)."""
    a, b = seconds_per_token(records, slow), seconds_per_token(records, fast)
    return {i: a[i] / b[i] for i in a if i in b}


def mean_speedup(records: Sequence[dict], slow: str, fast: str) -> float:
    """The mean over prompts of :func:`ratios`, without an interval (from any number of prompts)."""
    return float(np.mean(list(ratios(records, slow, fast).values())))


def _interval(values: Sequence[float]) -> Interval:
    if len(values) < MIN_PROMPTS:
        raise ValueError(f"{len(values)} prompts: an interval needs at least {MIN_PROMPTS}")
    return mean_of(values)


def speedup(records: Sequence[dict], slow: str, fast: str) -> Interval:
    """Step 4: the mean over prompts of :func:`ratios`, with its 95 % bootstrap interval over prompts (refused
    below :data:`MIN_PROMPTS` prompts)."""
    return _interval(list(ratios(records, slow, fast).values()))


def across_runs(runs: Sequence[Sequence[dict]], slow: str, fast: str) -> dict:
    """Step 5: the speedup of every run, the pooled speedup (each prompt's ratio averaged over the runs, then the
    interval over prompts) and the spread (largest minus smallest run's mean)."""
    per_run = [speedup(records, slow, fast) for records in runs]
    by_prompt = [ratios(records, slow, fast) for records in runs]
    shared = set.intersection(*(set(r) for r in by_prompt))
    pooled = _interval([float(np.mean([r[i] for r in by_prompt])) for i in sorted(shared)])
    means = [s.mean for s in per_run]
    return {"per_run": per_run, "pooled": pooled, "spread": max(means) - min(means)}


# ------------------------------------------------------------------------------------ result files, one per CPU kind
def add_file_arguments(parser: argparse.ArgumentParser, quick: str) -> None:
    """The options every protocol command shares (``quick``: what ``--quick`` shrinks the protocol to)."""
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=2, help="independent evaluation runs, each in its own process")
    parser.add_argument("--quick", action="store_true", help=quick)
    parser.add_argument("--show", action="store_true",
                        help="print the table and the README row of an existing --out file, measure nothing")
    parser.add_argument("--add-run", action="store_true",
                        help="append one more independent evaluation run to an existing --out file (same CPU kind)")
    parser.add_argument("--evaluate-run", type=int, default=None, help=argparse.SUPPRESS)


def append_run(out: Path, run: int, evaluation: Callable[[dict], tuple[dict[str, Decoder], Sequence[torch.Tensor]]],
               *, seed: int, command: str | None = None) -> None:
    """Step 5, one run: times ``evaluation(result)``'s configurations on its prompts (:func:`timed_runs`, the file's
    ``rounds``) and appends the records with the run's machine, date and ``command`` (``--add-run`` keeps its own) to
    ``out``. Refused, before ``evaluation`` loads any model, on a CPU kind other than the file's."""
    result = json.loads(out.read_text())
    machine = machine_info("cpu")
    if machine["cpu_kind"] != result["machine"]["cpu_kind"]:
        raise ValueError(f"{out} was measured on {result['machine']['cpu_kind']}, this machine is "
                         f"{machine['cpu_kind']}: a file holds one CPU kind; write a new --out file here")
    configs, prompts = evaluation(result)
    started = time.time()
    records = timed_runs(configs, prompts, rounds=result["settings"]["rounds"], seed=seed)
    result.setdefault("runs", []).append({"run": run, "seconds": time.time() - started, "machine": machine,
                                          "date": time.strftime("%Y-%m-%d", time.gmtime()),
                                          **({"command": command} if command else {}), "records": records})
    out.write_text(json.dumps(result, indent=1) + "\n")


def commands(result: dict) -> str:
    """The file's command in backticks, then that of every run added later with ``--add-run``."""
    added = [run["command"] for run in result.get("runs", []) if "command" in run]
    return " then ".join(f"`{command}`" for command in [result["command"], *added])


def file_command(args: argparse.Namespace, module: str, evaluate_run: Callable[[Path, int, str | None], None],
                 show: Callable[[dict], str]) -> bool:
    """Carries out ``--show``, ``--evaluate-run`` (one run, started by :func:`start_runs`) or ``--add-run`` on
    ``args.out``; False when the command is a new measurement instead."""
    if args.show:
        print(show(json.loads(args.out.read_text())))
    elif args.evaluate_run is not None:
        evaluate_run(args.out, args.evaluate_run, None)
    elif args.add_run:
        evaluate_run(args.out, len(json.loads(args.out.read_text())["runs"]),
                     f"python -m {module} --out {args.out} --add-run")
        print(show(json.loads(args.out.read_text())))
    else:
        return False
    return True


def start_runs(result: dict, out: Path, module: str, runs: int) -> None:
    """Writes the setup phases' ``result`` to ``out``, then appends ``runs`` evaluation runs, each in a process of
    its own (``python -m module --evaluate-run``), so that no run inherits another's warm caches."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    for run in range(runs):
        subprocess.run([sys.executable, "-m", module, "--out", str(out), "--evaluate-run", str(run)], check=True)
