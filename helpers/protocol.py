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
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import torch

from helpers.compare import Interval, mean_of
from helpers.decoding import Generation, SpecIteration
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
