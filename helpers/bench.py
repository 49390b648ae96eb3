"""Speed benchmark: our decoders against transformers' ``generate``, interleaved in one process.

``python -m helpers.bench [--quick] [--pair pocket] [--gammas 1,2,4] [--methods ...] [--out output/bench.json]``
(notebook 04 calls :func:`run_benchmark`, and 04, 06 and 07 show results with
:func:`helpers.bench_table.markdown_table`). What is compared, every method and its configurations per γ, is in
:mod:`helpers.bench_configs`; ``--methods`` (``methods=``) chooses among them, and ``naive``, the baseline, always
runs.

How it is timed, for every prompt:

1. every configuration first runs once, untimed, with a few tokens (warm-up, first prompt only);
2. each drafter's cost ratio c and the verification costs r(d) (:func:`helpers.timing.drafter_costs`), over
   :data:`COST_ROUNDS_PER_REPEAT` × ``repeats`` interleaved rounds on the first prompt;
3. ``repeats`` rounds in which every configuration generates exactly ``max_new_tokens`` tokens, EOS disabled, in
   an order shuffled anew every round (:func:`helpers.timing.interleaved`); speedups are per-round time ratios
   against ``naive``, and every raw time is kept (``raw_seconds``: per prompt, per configuration, per round);
4. one temperature-1 speculative run per prompt, for α at T = 1.

At temperature 0 (the default) all methods produce the same text, so only the time differs. The result also holds
α and two speedups next to the measured one: E[tokens] / (γ·c + r(γ)) from α (constant γ), and
n / Σ_rounds (d·c + r(d)) from the counted draft lengths (:func:`helpers.timing.speedup_from_counts`, every
drafter of ours). The tutorial's later speed numbers use the stricter protocol of :mod:`helpers.protocol`
(held-out requests, costs at several context lengths, γ selected on other prompts, several runs); this benchmark's
committed files predate it, and also the shuffled order and the raw times (README).
"""

from __future__ import annotations

import argparse
import datetime
import math
import shlex
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from tqdm.auto import tqdm

from helpers.bench_configs import (
    CONSTANT_GAMMA,
    DEFAULT_METHODS,
    DRAFTER,
    LABELS,
    METHODS,
    OURS_DRAFTING,
    Config,
    check_methods,
    configurations,
    drafter_steps,
    new_tokens,
    quiet_transformers,
    runners,
)
from helpers.bench_table import markdown_table
from helpers.compare import median_interval
from helpers.data import ARTICLE_PROMPTS, grounded_tasks, read_prompts, write_json
from helpers.decoding import Generation, speculative
from helpers.heads import DraftHead, load_head
from helpers.machine import load_average, machine_info
from helpers.models import Pair, load_pair, self_draft
from helpers.protocol import MIN_PROMPTS
from helpers.timing import (
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

Prompt = str | torch.Tensor
"""A prompt as text (encoded with the pair's tokenizer) or already encoded as a (1, T) LongTensor."""


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


@dataclass
class _Timed:
    """What the timed rounds of every prompt collect, per configuration name."""

    names: list[str]
    per_token: dict[str, list[float]] = field(default_factory=dict)  # seconds per token, every round
    speedups: dict[str, list[list[float]]] = field(default_factory=dict)  # per prompt: one ratio per round
    same_text: dict[str, list[bool]] = field(default_factory=dict)
    lengths: dict[str, set[int]] = field(default_factory=dict)
    drafted: dict[str, list[Generation]] = field(default_factory=dict)  # our drafting methods' runs
    naive_over_hf: list[float] = field(default_factory=list)
    spec_over_hf: dict[int, list[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in self.names:
            self.per_token[name], self.speedups[name], self.same_text[name] = [], [], []
            self.lengths[name] = set()

    def add_prompt(self, times: dict[str, list[float]], outputs: dict[str, list], n: int) -> None:
        """One prompt's interleaved rounds: per-token times, ratios against naive, same text, HF comparisons."""
        for name in self.names:
            self.speedups[name].append([])
        for round_, naive_time in enumerate(times["naive"]):
            reference = new_tokens(outputs["naive"][round_])
            for name in self.names:
                tokens = new_tokens(outputs[name][round_])
                self.per_token[name].append(times[name][round_] / n)
                self.speedups[name][-1].append(naive_time / times[name][round_])
                self.same_text[name].append(tokens == reference)
                self.lengths[name].add(len(tokens))
            if "hf_greedy" in times:
                self.naive_over_hf.append(naive_time / times["hf_greedy"][round_])
            for gamma in self.spec_over_hf:
                self.spec_over_hf[gamma].append(times[f"speculative_g{gamma}"][round_]
                                                / times[f"hf_assisted_g{gamma}"][round_])
        for name in self.drafted:
            self.drafted[name] += outputs[name]


def _check(prompts: Sequence[Prompt], gammas: list[int], repeats: int, max_new_tokens: int,
           temperature: float) -> None:
    if not prompts:
        raise ValueError("give at least one prompt")
    if not gammas or any(isinstance(g, bool) or not isinstance(g, int) or g < 1 for g in gammas):
        raise ValueError(f"gammas must be ints >= 1, got {gammas!r}")
    if repeats < 1 or max_new_tokens < 1 or not temperature >= 0:
        raise ValueError(f"need repeats >= 1, max_new_tokens >= 1 and temperature >= 0, got "
                         f"{repeats}, {max_new_tokens}, {temperature}")


def _row(config: Config, timed: _Timed, c_by: dict[str, float], r_by_length: dict[int, float],
         alpha_t1: float) -> dict:
    """One configuration's line of the result: its times, speedup against naive, and for drafters α, c, r and the
    two explained speedups."""
    name, method, gamma = config
    row: dict = {"name": name, "method": method, "label": LABELS[method], "gamma": gamma,
                 "per_token_s": asdict(summarize(timed.per_token[name])),
                 "new_tokens": sorted(timed.lengths[name]),
                 "same_text_as_naive": sum(timed.same_text[name]) / len(timed.same_text[name]),
                 "speedup_vs_naive": median([x for per_prompt in timed.speedups[name] for x in per_prompt]),
                 "speedup_interval": (median_interval(timed.speedups[name])
                                      if len(timed.speedups[name]) >= MIN_PROMPTS else None)}
    if method in DRAFTER:
        row["c"] = c_by[DRAFTER[method]]
    if method in OURS_DRAFTING:
        runs = timed.drafted[name]
        row.update(_pooled_stats(runs))
        row["r"] = r_by_length[gamma]
        lengths_drafted = [len(it.draft) for g in runs for it in g.trace]
        row["explained_from_counts"] = speedup_from_counts(
            lengths_drafted, sum(len(g.new_token_ids) for g in runs), row["c"], r_by_length)
    if method in CONSTANT_GAMMA:
        alpha = row["alpha"]
        known = not math.isnan(alpha)
        row["expected_tokens_per_call"] = expected_tokens(alpha, gamma) if known else math.nan
        row["predicted_speedup"] = predicted_speedup(alpha, gamma, row["c"], row["r"]) if known else math.nan
    if method == "speculative":
        row["predicted_speedup_t1"] = (predicted_speedup(alpha_t1, gamma, c_by["amateur"], r_by_length[gamma])
                                       if not math.isnan(alpha_t1) else math.nan)
    return row


def run_benchmark(pair: Pair, prompts: Sequence[Prompt], gammas: Sequence[int], repeats: int = 3,
                  max_new_tokens: int = 48, temperature: float = 0.0, seed: int = 0,
                  progress: bool = True, methods: Sequence[str] | None = None,
                  confidence_threshold: float = 0.4, head: DraftHead | None = None) -> dict:
    """Time every configuration on every prompt (interleaved) and return a JSON-ready dict (module docstring:
    the four steps).

    Prompts are text (encoded with ``pair.encode``) or (1, T) LongTensors. Per-token time = run time / N.
    Ratios and speedups are computed per round from the interleaved runs, then the median is taken.
    ``methods``: names from :data:`~helpers.bench_configs.METHODS` (default
    :data:`~helpers.bench_configs.DEFAULT_METHODS`; naive always runs). ``confidence_threshold``: the dynamic
    draft length of ``speculative_dynamic``. ``head``: the draft head of method ``head`` (default: the committed
    one, :func:`helpers.heads.load_head`).
    """
    gammas = list(gammas)
    methods = check_methods(methods)
    _check(prompts, gammas, repeats, max_new_tokens, temperature)
    started, load_before = time.perf_counter(), load_average()
    busy = load_warning()
    if busy:
        warnings.warn(busy, RuntimeWarning, stacklevel=2)
    n = max_new_tokens
    encoded = [p if isinstance(p, torch.Tensor) else pair.encode(p) for p in prompts]
    configs = configurations(gammas, methods)
    names = [name for name, _, _ in configs]
    self_drafter = self_draft(pair.expert) if "self_draft" in methods else None
    if "head" in methods and head is None:
        head = load_head(pair.expert)
    timed = _Timed(names)
    timed.drafted = {name: [] for name, method, _ in configs if method in OURS_DRAFTING}
    if {"speculative", "hf_assisted"} <= set(methods):
        timed.spec_over_hf = {gamma: [] for gamma in gammas}

    def runs_for(input_ids: torch.Tensor, tokens: int, outputs: dict[str, list]) -> dict:
        return runners(pair, input_ids, configs, tokens, temperature, seed, outputs, self_drafter, head,
                       confidence_threshold)

    raw: list[dict[str, list[float]]] = []
    bar = tqdm(total=(1 + repeats * len(encoded)) * len(names) + len(encoded), desc="bench", unit="run",
               disable=not progress)
    with quiet_transformers():
        bar.set_postfix_str("warm-up")  # 1.
        interleaved(runs_for(encoded[0], warmup_tokens(gammas, n), {name: [] for name in names}), repeats=1,
                    warmup=0, on_run=lambda _name: bar.update())
        bar.set_postfix_str("cost ratios")  # 2.
        c_by, r_by_length = drafter_costs(pair.expert, encoded[0],
                                          drafter_steps(pair, encoded[0], methods, self_drafter, head),
                                          range(1, max(gammas) + 1), COST_ROUNDS_PER_REPEAT * repeats)
        for index, input_ids in enumerate(encoded):  # 3.
            bar.set_postfix_str(f"prompt {index + 1}/{len(encoded)}")
            outputs: dict[str, list] = {name: [] for name in names}
            times = interleaved(runs_for(input_ids, n, outputs), repeats, warmup=0, on_run=lambda _name: bar.update(),
                                seed=seed + index)
            timed.add_prompt(times, outputs, n)
            raw.append(times)
        bar.set_postfix_str("alpha at T=1")  # 4. (at T=0, β is only 0/1 agreement)
        t1_runs = []
        for index, input_ids in enumerate(encoded):
            t1_runs.append(speculative(pair.expert, pair.amateur, input_ids, max_new_tokens=n, gamma=max(gammas),
                                       temperature=1.0, eos_token_id=None,
                                       generator=torch.Generator(input_ids.device).manual_seed(seed + index)))
            bar.update()
    bar.close()
    t1 = _pooled_stats(t1_runs)
    return {
        "machine": {**machine_info(encoded[0].device), "load_average_before": load_before,
                    "load_average_after": load_average()},
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
        "cost": {"c": c_by["amateur"], "r": {gamma: r_by_length[gamma] for gamma in gammas}, "c_by_drafter": c_by,
                 "r_by_draft_length": r_by_length, "rounds": COST_ROUNDS_PER_REPEAT * repeats,
                 "note": "c = drafter's 1-token step / expert 1-token step (c is the amateur's; c_by_drafter "
                         "every drafter's; prompt_lookup: one n-gram lookup); r(γ) = expert forward over γ+1 "
                         "tokens / expert 1-token step (KV-cached, interleaved, median of per-round ratios); "
                         "r_by_draft_length: r(d) for every d up to max γ, r(0) = 1"},
        "alpha_t1": {"alpha": t1["alpha"], "gamma": max(gammas), "n_positions": t1["n_positions"],
                     "note": "mean β of one temperature-1 speculative run per prompt; the timed runs' α is "
                             "at the timed temperature (at T=0: greedy 0/1 agreement)"},
        "alpha_source": ("mean β of the timed runs at temperature "
                         f"{temperature:g}" + (" = accepted / judged draft positions" if temperature == 0 else "")),
        "configurations": [_row(config, timed, c_by, r_by_length, t1["alpha"]) for config in configs],
        "ratios": {
            "ours_naive_over_hf_greedy": median(timed.naive_over_hf) if timed.naive_over_hf else None,
            "ours_speculative_over_hf_assisted": {gamma: median(v) for gamma, v in timed.spec_over_hf.items()},
            "note": "time ratios per interleaved round, then median; < 1 means ours is faster",
        },
        "raw_seconds": raw,
        "wall_s": time.perf_counter() - started,
    }


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
