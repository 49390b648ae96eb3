"""helpers.machine: the CPU's kind, the bf16 rule for training, and the float regime that nbval compares across."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from helpers import machine


@pytest.mark.parametrize(("flags", "fast"), [
    ("fpu avx2 avx512f avx512_bf16", True),     # AMD EPYC with AVX-512 and bf16 (Zen 4)
    ("fpu avx2 avx512f amx_bf16 amx_tile", True),  # Intel Xeon with AMX
    ("fpu avx2 avx512f avx512bw", False),       # Intel Xeon with AVX-512 but no bf16
    ("fpu avx2 fma", False),                    # AMD EPYC Zen 3: AVX2 only
])
def test_bf16_is_the_fast_path_only_with_hardware_bf16(monkeypatch, flags, fast):
    monkeypatch.setattr(machine, "cpu_flags", lambda: frozenset(flags.split()))
    assert machine.cpu_fast_bf16() is fast
    assert machine.fast_bf16("cpu") is fast
    assert ("bf16" in machine.describe_cpu()) is fast


def test_the_cpu_is_named_with_its_instruction_set():
    assert torch.backends.cpu.get_cpu_capability() in machine.describe_cpu()
    regime = machine.float_regime()
    assert set(regime) == {"cpu", "capability", "threads", "mkl_cbwr", "torch"}
    assert regime["mkl_cbwr"] == os.environ.get("MKL_CBWR", "native")


def _product_bits(env: dict[str, str]) -> str:
    code = ("import torch; g = torch.Generator().manual_seed(0); a = torch.randn(64, 576, generator=g); "
            "b = torch.randn(576, 1536, generator=g); print((a @ b).numpy().tobytes().hex()[:4096])")
    return subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True,
                          text=True).stdout


def test_the_suites_regime_rounds_differently_from_the_native_one():
    """MKL_CBWR=COMPATIBLE (tests/conftest.py) changes the bits of a matrix product like the expert's: nbval's
    comparison of committed (native) outputs with fresh ones is a comparison across two float regimes."""
    assert os.environ["MKL_CBWR"] == "COMPATIBLE"
    native = {key: value for key, value in os.environ.items() if key != "MKL_CBWR"}
    assert _product_bits(native) != _product_bits(dict(os.environ))
