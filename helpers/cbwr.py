"""MKL's code paths and their rounding: the test suite's second floating-point regime.

MKL, torch's CPU BLAS, picks its matrix-product kernels for the CPU it runs on ("native"). Its conditional
numerical reproducibility setting ``MKL_CBWR`` pins another code path instead (``AVX2``, ``AVX``, ``COMPATIBLE`` =
SSE2), and each path sums a dot product in its own order, so the last bits of a product differ. The test suite
re-runs every notebook under such a path (``tests/conftest.py``), which makes every nbval run a comparison of the
committed, natively computed outputs with outputs from another float regime.

Which path: the first of :data:`CANDIDATES` whose bits differ from the native ones on this CPU. They are ordered
by speed: on one Intel Xeon with AVX-512, bf16 and AMX (``python -m helpers.cbwr``, the best of 3 runs), 32 greedy
tokens of the pocket expert took 1.1 s natively, 1.1 s under ``AVX2``, 1.5 s under ``AVX`` and 2.5 s under
``COMPATIBLE``, whose SSE2 kernels differ from every native path but make the suite's decoding twice as slow. On a
CPU whose native path is AVX2, ``AVX2`` rounds like native and the next candidate is taken.

This module does not import torch: ``MKL_CBWR`` must be in the environment before torch loads MKL, so the probes
run in subprocesses.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from functools import cache

CANDIDATES = ("AVX2", "AVX", "COMPATIBLE")
"""MKL code paths to try, fastest first; ``COMPATIBLE`` (SSE2) rounds differently from every native path."""

PROBE = ("import hashlib, torch; g = torch.Generator().manual_seed(0); w = torch.randn(576, 1536, generator=g); "
         "x = torch.randn(64, 576, generator=g); "
         "print(hashlib.sha256((x[:1] @ w).numpy().tobytes() + (x @ w).numpy().tobytes()).hexdigest())")
"""Products shaped like the pocket expert's: one decoding step (1 row) and a prefill (64 rows), 576 -> 1536."""

TIMING = ("import time; from helpers.decoding import naive; from helpers.models import load_pair; "
          "pair = load_pair('pocket'); ids = pair.encode('Barack Obama was'); "
          "naive(pair.expert, ids, max_new_tokens=4, temperature=0); times = []\n"
          "for _ in range(3):\n    t = time.perf_counter(); naive(pair.expert, ids, max_new_tokens=32, temperature=0); "
          "times.append(time.perf_counter() - t)\nprint(min(times))")
"""The best of 3 timings of 32 greedy tokens of the pocket expert (after a warm-up)."""


def _run(code: str, cbwr: str | None) -> str:
    env = {key: value for key, value in os.environ.items() if key != "MKL_CBWR"}
    if cbwr is not None:
        env["MKL_CBWR"] = cbwr
    run = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True)
    return run.stdout.strip()


def product_bits(cbwr: str | None) -> str:
    """A hash of :data:`PROBE`'s products computed in a fresh process under ``MKL_CBWR=cbwr`` (None: native)."""
    return _run(PROBE, cbwr)


@cache
def other_regime() -> str:
    """The fastest MKL code path that rounds differently from the native one here (:data:`CANDIDATES`)."""
    native = product_bits(None)
    for candidate in CANDIDATES:
        if product_bits(candidate) != native:
            return candidate
    raise RuntimeError(f"none of MKL_CBWR={', '.join(CANDIDATES)} rounds differently from MKL's native kernels on "
                       "this CPU; set MKL_CBWR to another code path (MKL's documentation lists them) before pytest")


def main() -> None:
    parser = argparse.ArgumentParser(description="Which MKL code paths round differently from the native one here, "
                                                 "and what each costs the pocket expert's decoding (needs the "
                                                 "pocket pair: make models). Run it on an otherwise idle machine.")
    parser.parse_args()
    native = product_bits(None)
    for cbwr in (None, *CANDIDATES):
        differs = "native" if cbwr is None else ("rounds differently" if product_bits(cbwr) != native else
                                                   "rounds like native")
        print(f"MKL_CBWR={cbwr or '(unset)':10s} {differs:18s} 32 greedy tokens: {float(_run(TIMING, cbwr)):.2f} s")
    print(f"the test suite's regime here: MKL_CBWR={other_regime()}")


if __name__ == "__main__":
    main()
