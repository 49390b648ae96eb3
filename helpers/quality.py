"""Text quality of the decoding methods (notebook 04, and ``python -m helpers.quality``).

For every prompt, each method writes continuations; each continuation gets the lexical metrics of
:mod:`helpers.metrics` (on the continuation only, and once more with the prompt included, as the source article
measured), the expert's negative log-likelihood of every continuation token (``nll``, the list; ``mean NLL``, its
mean) and its perplexity (exp of that mean). Sampling methods write ``samples`` continuations per prompt with
different seeds; greedy and contrastive decoding are deterministic, so they write one.

``python -m helpers.quality [--quick] [--pair pocket] [--prompts data/prompts.txt] [--samples 2] [--out F]``;
``python -m helpers.quality --rescore F`` adds the per-token NLL to a result file written before it was recorded.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from tqdm.auto import tqdm

from helpers.data import ARTICLE_PROMPTS, PROMPTS, read_prompts
from helpers.decoding import contrastive, contrastive_search, dola, naive
from helpers.machine import machine_info
from helpers.metrics import summarize, text_metrics, token_nll
from helpers.models import Pair, early_exit, load_pair

REPO = Path(__file__).resolve().parent.parent

Method = Callable[[Pair, torch.Tensor, int, torch.Generator], list[int]]


def _sampling(**knobs: float) -> Method:
    def run(pair: Pair, ids: torch.Tensor, n: int, generator: torch.Generator) -> list[int]:
        return naive(pair.expert, ids, max_new_tokens=n, generator=generator, eos_token_id=pair.eos_token_id,
                     **knobs).new_token_ids
    return run


def _contrastive(alpha: float, amateur: Callable[[Pair], torch.nn.Module] | None = None) -> Method:
    def run(pair: Pair, ids: torch.Tensor, n: int, generator: torch.Generator) -> list[int]:
        model = amateur(pair) if amateur is not None else pair.amateur
        return contrastive(pair.expert, model, ids, max_new_tokens=n, alpha=alpha,
                           eos_token_id=pair.eos_token_id).new_token_ids
    return run


def _one_model(decoder: Callable[..., object], **knobs: object) -> Method:
    def run(pair: Pair, ids: torch.Tensor, n: int, generator: torch.Generator) -> list[int]:
        return decoder(pair.expert, ids, max_new_tokens=n, eos_token_id=pair.eos_token_id, **knobs).new_token_ids
    return run


METHODS: dict[str, tuple[Method, bool]] = {
    "sampling T=1": (_sampling(temperature=1.0), True),
    "greedy": (_sampling(temperature=0), False),
    "greedy + repetition penalty 1.2": (_sampling(temperature=0, repetition_penalty=1.2), False),
    "top-p 0.95": (_sampling(top_p=0.95), True),
    "contrastive α=0.1": (_contrastive(0.1), False),
    "contrastive α=0.1 (early-exit amateur)": (_contrastive(0.1, lambda pair: early_exit(pair.expert)), False),
    "contrastive search": (_one_model(contrastive_search, penalty_alpha=0.6, top_k=4), False),
    "DoLa": (_one_model(dola), False),  # repetition penalty 1.2, the paper's default
    "DoLa without repetition penalty": (_one_model(dola, repetition_penalty=1.0), False),
}
"""name -> (method, samples?); deterministic methods run once per prompt. Notebook 04 uses the defaults, notebook
05 the early-exit contrast (its comparison of amateurs), notebook 06 contrastive search and DoLa, and the two
penalty rows that separate DoLa's contrast (DoLa uses the paper's repetition penalty 1.2) from the penalty."""
DEFAULT_METHODS = ("sampling T=1", "greedy", "top-p 0.95", "contrastive α=0.1")


def evaluate(pair: Pair, prompts: Sequence[str], *, samples: int = 2, max_new_tokens: int = 48, seed: int = 0,
             methods: Sequence[str] = DEFAULT_METHODS, progress: bool = True) -> list[dict]:
    """One row per (prompt, method, sample): the text, its metrics and the expert's perplexity of it."""
    unknown = set(methods) - set(METHODS)
    if unknown:
        raise ValueError(f"unknown methods {sorted(unknown)}; choose from {list(METHODS)}")
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    jobs = [(p, m, s) for p in prompts for m in methods for s in range(samples if METHODS[m][1] else 1)]
    rows = []
    for i, (prompt, name, sample) in enumerate(tqdm(jobs, desc="quality", disable=not progress)):
        ids = pair.encode(prompt)
        new = METHODS[name][0](pair, ids, max_new_tokens, torch.Generator().manual_seed(seed + i))
        text = pair.decode(new)
        rows.append({"prompt": prompt, "method": name, "sample": sample, "text": text, "n_tokens": len(new),
                     **text_metrics(text), **_likelihood(token_nll(pair.expert, ids, new) if new else []),
                     "with_prompt": text_metrics(prompt + text)})
    return rows


def _likelihood(nll: list[float]) -> dict:
    """A row's likelihood fields: the per-token NLL (rounded to 1e-5 nats), its mean and the perplexity."""
    if not nll:
        return {"nll": [], "mean NLL": float("nan"), "perplexity": float("nan")}
    mean = sum(nll) / len(nll)
    return {"nll": [round(x, 5) for x in nll], "mean NLL": mean, "perplexity": math.exp(mean)}


def rescore(pair: Pair, rows: Sequence[dict], progress: bool = True) -> int:
    """Add ``nll`` and ``mean NLL`` to rows recorded without them, in place (their recorded perplexity stays): each
    row's prompt and text are encoded again (the run stored no token ids) and scored by the expert. Returns how
    many rows reproduce their recorded perplexity (relative difference <= 1e-3): those were re-encoded to the
    tokens the decoder wrote; the others to another split of the same text (e.g. two newlines as one token where
    the decoder wrote two), and their NLL is that split's."""
    reproduced = 0
    for row in tqdm(rows, desc="rescore", disable=not progress):
        ids = pair.encode(row["prompt"])
        new = pair.tokenizer(row["text"], add_special_tokens=False).input_ids
        fields = _likelihood(token_nll(pair.expert, ids, new) if new else [])
        reproduced += bool(new) and abs(fields.pop("perplexity") / row["perplexity"] - 1) <= 1e-3
        row.update(fields)
    return reproduced


METRICS = ("entropy-1", "entropy-2", "entropy-3", "distinct-1", "distinct-2", "rep-2", "rep-3", "rep-4",
           "diversity", "perplexity", "mean NLL")


def summary(rows: Sequence[dict], *, with_prompt: bool = False) -> dict[str, dict[str, tuple[float, float]]]:
    """method -> metric -> (mean, std) over all rows of that method."""
    out = {}
    for method in dict.fromkeys(r["method"] for r in rows):
        mine = [r["with_prompt"] if with_prompt else {k: r[k] for k in METRICS if k in r} for r in rows
                if r["method"] == method]
        out[method] = summarize(mine)
    return out


def markdown_table(table: dict[str, dict[str, tuple[float, float]]], metrics: Sequence[str] | None = None, *,
                   spread: bool = True) -> str:
    """Metrics as rows, methods as columns, mean ± std (the shape of the source article's results); ``spread=False``
    shows the means alone (one continuation per method has no spread to show)."""
    methods = list(table)
    metrics = metrics or [m for m in METRICS if m in next(iter(table.values()))]
    lines = ["| metric | " + " | ".join(methods) + " |", "|---|" + "---:|" * len(methods)]
    for metric in metrics:
        cells = [f"{table[m][metric][0]:.3f}" + (f" ± {table[m][metric][1]:.3f}" if spread else "") for m in methods]
        lines.append(f"| {metric} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run(pair_name: str, prompt_files: Sequence[Path], samples: int, max_new_tokens: int, seed: int,
        limit: int | None = None, progress: bool = True, methods: Sequence[str] = DEFAULT_METHODS,
        amateur: str | None = None) -> dict:
    """Evaluate every prompt file; returns the JSON-ready result with rows and summaries. ``amateur`` is
    :func:`helpers.models.load_pair`'s (None: the pair's default amateur)."""
    start = time.perf_counter()
    pair = load_pair(pair_name, amateur=amateur)
    result = {"command": "python -m helpers.quality " + shlex.join(sys.argv[1:]),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "settings": {"pair": pair_name, "expert": pair.expert_name, "amateur": pair.amateur_name,
                           "methods": list(methods), "samples": samples, "max_new_tokens": max_new_tokens,
                           "seed": seed,
                           "torch": torch.__version__, "threads": torch.get_num_threads()},
              "machine": machine_info(pair.device),
              "sets": {}}
    for path in prompt_files:
        rows = evaluate(pair, read_prompts(path, limit), samples=samples, max_new_tokens=max_new_tokens,
                        seed=seed, methods=methods, progress=progress)
        result["sets"][Path(path).name] = {"rows": rows, "summary": summary(rows),
                                           "summary_with_prompt": summary(rows, with_prompt=True)}
    result["wall_s"] = time.perf_counter() - start
    return result


def rescore_file(path: Path, progress: bool = True) -> dict:
    """:func:`rescore` every row of a result file, recompute its summaries and record what was done in it."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such result file (write one with python -m helpers.quality --out ...)")
    result = json.loads(path.read_text())
    pair = load_pair(result["settings"]["pair"])
    reproduced = total = 0
    for data in result["sets"].values():
        reproduced += rescore(pair, data["rows"], progress)
        total += len(data["rows"])
        data["summary"] = summary(data["rows"])
    result["rescored"] = {
        "command": "python -m helpers.quality --rescore " + shlex.quote(str(path)),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "note": "nll and mean NLL of every row added by the expert from the row's prompt and text encoded again (the "
                "run stored no token ids); a row that does not reproduce its recorded perplexity was re-encoded to "
                "another token split of the same text, and its NLL is that split's",
        "rows_reproducing_the_recorded_perplexity": reproduced, "rows": total, "machine": machine_info(pair.device)}
    path.write_text(json.dumps(result, indent=1, ensure_ascii=False))
    print(f"{path}: {reproduced} of {total} rows reproduce their recorded perplexity (relative difference <= 1e-3)")
    return result["rescored"]


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m helpers.quality", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pair", default="pocket")
    parser.add_argument("--amateur", default=None,
                        help="the contrastive amateur, e.g. early-exit (default: the pair's own, the distilled draft)")
    parser.add_argument("--prompts", type=Path, nargs="+", default=[ARTICLE_PROMPTS, PROMPTS],
                        help="prompt files, one prompt per line (default: the article's five + data/prompts.txt)")
    parser.add_argument("--samples", type=int, default=3, help="continuations per prompt for sampling methods")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=int, default=None, help="use only the first N prompts of each file")
    parser.add_argument("--quick", action="store_true", help="2 prompts per file, 1 sample, 24 tokens")
    parser.add_argument("--methods", default=",".join(DEFAULT_METHODS),
                        help=f"comma-separated, from: {'; '.join(METHODS)} (default: the first four)")
    parser.add_argument("--out", type=Path, default=REPO / "output" / "quality.json")
    parser.add_argument("--rescore", type=Path, nargs="+", default=None, metavar="FILE",
                        help="instead of generating: add the expert's per-token NLL to these result files in place")
    args = parser.parse_args(argv)
    if args.rescore:
        return {str(path): rescore_file(path) for path in args.rescore}
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        parser.error(f"unknown --methods {unknown or args.methods!r}; choose from {list(METHODS)}")
    if args.quick:
        args.limit, args.samples, args.max_new_tokens = args.limit or 2, 1, 24
    result = run(args.pair, args.prompts, args.samples, args.max_new_tokens, args.seed, args.limit,
                 methods=methods, amateur=args.amateur)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False))
    for name, data in result["sets"].items():
        print(f"\n### {name}: continuation only\n\n{markdown_table(data['summary'])}")
    print(f"\nwrote {args.out} in {result['wall_s']:.0f} s")
    return result


if __name__ == "__main__":
    main()
