"""``python -m helpers.gpu_check`` (``make gpu-check``): the tutorial's claims and its speed protocol on a GPU.

A GPU machine may be lent to a session: no network, its own torch and transformers, and the working tree copied to
it at most 64 MiB per call. The pocket expert's GGUF file (93 MB) does not fit in one call beside the tree, so:

1. ``python -m helpers.gpu_check pack`` (here, on the CPU) splits the cached GGUF file into parts of at most
   ``--part-mib`` MiB under ``build/gpu/`` and copies the pure-Python ``gguf`` package there (transformers needs it
   to read the file; the GPU machine's Python does not have it);
2. each call to the GPU machine carries one part (``build/gpu/part-*``; files from earlier calls stay while the
   machine is warm), the last call runs ``python -m helpers.gpu_check run``, which reassembles the file, checks its
   sha256 and runs everything below.

``run`` checks on the device, each a claim of the notebooks:

* **exactness** (notebook 03): one round of speculative sampling, enumerated path by path in float64 on tiny
  models, gives the expert's distribution of the next γ + 1 tokens (:func:`helpers.stats.round_error` < 1e-6);
* **greedy identity** (notebooks 03 and 07): greedy speculative decoding with the distilled draft and with the
  draft head equals greedy decoding, token for token in fp32, up to a near-tie that rounding explains in bf16
  (:func:`helpers.precision.compare_greedy_texts`);
* **speed** (notebooks 04 and 07): the benchmark of :func:`helpers.bench.run_benchmark` (interleaved rounds,
  medians, intervals over prompts) for naive decoding, the distilled draft and the draft head, in fp32 and bf16,
  and the forward-cost curve r(n).

It writes ``data/results/speed-<device>-<gpu>.json``. ``--device cpu --quick`` runs the same code on the CPU (the
test suite does, so that the GPU run has only CUDA left to go wrong).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import time
from pathlib import Path

import torch

from helpers.bench import run_benchmark
from helpers.data import ARTICLE_PROMPTS, RESULTS, read_prompts
from helpers.decoding import naive, speculative
from helpers.heads import head_speculative, load_head
from helpers.machine import machine_info
from helpers.models import POCKET_GGUF, POCKET_GGUF_SHA256, _check_sha256, cache_dir, load_pair, tiny_random_model
from helpers.precision import compare_greedy_texts, exact_arithmetic
from helpers.stats import exact_distribution, round_error
from helpers.timing import forward_costs

REPO = Path(__file__).resolve().parent.parent
PACK = REPO / "build" / "gpu"
EXACT_TOLERANCE = 1e-6


# ----------------------------------------------------------------------------------------- the transfer
def pack(gguf: Path, folder: Path = PACK, part_mib: int = 20) -> list[Path]:
    """Split ``gguf`` into ``folder/part-000``, ``part-001``, ... of at most ``part_mib`` MiB, and copy the
    ``gguf`` package beside them (``folder/python/gguf``); returns the parts."""
    if part_mib < 1:
        raise ValueError(f"part_mib must be >= 1, got {part_mib}")
    import gguf as gguf_package

    shutil.rmtree(folder, ignore_errors=True)
    (folder / "python").mkdir(parents=True)
    shutil.copytree(Path(gguf_package.__file__).parent, folder / "python" / "gguf",
                    ignore=shutil.ignore_patterns("__pycache__"))
    parts, size = [], part_mib << 20
    with gguf.open("rb") as f:
        while block := f.read(size):
            parts.append(folder / f"part-{len(parts):03d}")
            parts[-1].write_bytes(block)
    return parts


def unpack(folder: Path = PACK, cache: Path | None = None) -> Path:
    """Join ``folder/part-*`` into the pocket GGUF file where :func:`helpers.models.load_pair` looks for it, and
    check its sha256 (a part missing or left over from another file is refused)."""
    parts = sorted(folder.glob("part-*"))
    if not parts:
        raise FileNotFoundError(f"no parts in {folder}: run `python -m helpers.gpu_check pack` first, then carry "
                                "build/gpu/ to the GPU machine")
    target = (cache or cache_dir()) / "gguf" / POCKET_GGUF
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("wb") as out:
        for part in parts:
            out.write(part.read_bytes())
    _check_sha256(target, POCKET_GGUF_SHA256)
    return target


# --------------------------------------------------------------------------------------------- checks
def check_exactness(device: torch.device, gammas: tuple[int, ...] = (1, 2)) -> dict[str, float]:
    """{γ: TV error} of one enumerated round of speculative sampling on float64 tiny models on ``device``."""
    expert = tiny_random_model(2, layers=2, vocab=6).double().to(device)
    amateur = tiny_random_model(3, vocab=6).double().to(device)
    prompt = torch.tensor([[1, 2, 3]], device=device)
    errors = {}
    for gamma in gammas:
        outputs = exact_distribution(lambda g=gamma: tuple(speculative(
            expert, amateur, prompt, max_new_tokens=g + 1, gamma=g, temperature=1.0).trace[0].emitted),
            branching_draws=gamma + 1)
        errors[str(gamma)] = round_error(outputs, expert, prompt, gamma + 1, temperature=1.0)
    return errors


def check_greedy(pair, head, prompts: list[str], gammas: tuple[int, ...], max_new_tokens: int) -> list[dict]:
    """Greedy speculative decoding (distilled draft, draft head) against greedy decoding, per prompt and γ."""
    rows = []
    for text in prompts:
        ids = pair.encode(text)
        greedy = naive(pair.expert, ids, max_new_tokens=max_new_tokens, temperature=0).new_token_ids
        for gamma in gammas:
            for drafter, out in (
                    ("distilled", speculative(pair.expert, pair.amateur, ids, max_new_tokens=max_new_tokens,
                                              gamma=gamma, temperature=0)),
                    ("head", head_speculative(pair.expert, head, ids, max_new_tokens=max_new_tokens, gamma=gamma,
                                              temperature=0))):
                agreement = compare_greedy_texts(pair.expert, ids, greedy, out.new_token_ids)
                rows.append({"prompt": text, "gamma": gamma, "drafter": drafter, "identical": agreement.identical,
                             "explained_by_rounding": agreement.explained_by_rounding,
                             "detail": agreement.describe()})
    return rows


def run(device: str, *, quick: bool = False, out: Path | None = None, command: str = "") -> dict:
    """Every check and the speed protocol on ``device`` for fp32 and bf16; writes and returns the result."""
    started = time.perf_counter()
    device_ = torch.device(device)
    prompts = read_prompts(ARTICLE_PROMPTS)[:1 if quick else None]
    gammas = (1, 2) if quick else (1, 2, 3, 4, 6, 8)
    tokens = 8 if quick else 64
    result = {"command": command or f"helpers.gpu_check.run({device!r}, quick={quick})",
              "machine": machine_info(device_), "exactness": check_exactness(device_), "dtypes": {}}
    for dtype in (torch.float32, torch.bfloat16):
        pair = load_pair("pocket", device=device_, dtype=dtype)
        head = load_head(pair.expert)
        greedy = check_greedy(pair, head, prompts, gammas, tokens)
        bench = run_benchmark(pair, prompts, list(gammas), repeats=1 if quick else 3, max_new_tokens=tokens,
                              methods=["naive", "speculative", "head"], head=head, progress=False)
        r = forward_costs(pair.expert, pair.encode(prompts[0]), [1, 2, 3, 5, 9] if quick else list(range(1, 17)),
                          repeats=2 if quick else 20)
        result["dtypes"][str(dtype).removeprefix("torch.")] = {
            "exact_arithmetic": exact_arithmetic(pair.expert), "greedy": greedy,
            "r_by_tokens": {str(n): v for n, v in r.items()}, "bench": bench}
    result["seconds"] = time.perf_counter() - started
    result["claims"] = claims(result)
    out = out or RESULTS / f"speed-{device_.type}-{_slug(result['machine']['gpu'] or 'cpu')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(f"wrote {out} in {result['seconds']:.0f} s: {result['claims']}")
    return result


def claims(result: dict) -> dict[str, bool]:
    """The notebooks' claims, as read from a result: exactness, greedy identity (fp32), up to near-ties (bf16)."""
    found = {"exact round (03)": all(e < EXACT_TOLERANCE for e in result["exactness"].values())}
    for name, data in result["dtypes"].items():
        key = "identical" if data["exact_arithmetic"] else "explained_by_rounding"
        found[f"greedy identity, {name} (03, 07)"] = all(row[key] for row in data["greedy"])
    return found


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helpers.gpu_check", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack", help="split the cached pocket GGUF into parts under build/gpu/ (run on the CPU)")
    p.add_argument("--part-mib", type=int, default=20)
    r = sub.add_parser("run", help="reassemble the parts (if any) and run every check on the device")
    r.add_argument("--device", default="cuda")
    r.add_argument("--quick", action="store_true", help="one prompt, γ = 1, 2, 8 tokens (about 20 s on a 2-core CPU)")
    r.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.command == "pack":
        from helpers.models import fetch_pocket_gguf

        parts = pack(fetch_pocket_gguf(), part_mib=args.part_mib)
        print(f"{len(parts)} parts in {PACK}: carry build/gpu/python and one part per call")
        return 0
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("no CUDA device here: use --device cpu to run the checks on the CPU")
    if sorted(PACK.glob("part-*")):
        unpack()
    result = run(args.device, quick=args.quick, out=args.out,
                 command="python -m helpers.gpu_check " + " ".join(argv if argv is not None else sys.argv[1:]))
    return 0 if all(result["claims"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
