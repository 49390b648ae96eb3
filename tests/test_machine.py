"""helpers.machine: the CPU's kind, the bf16 rule for training, and the float regime that nbval compares across."""

from __future__ import annotations

import os

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
    assert ("AMX" in machine.describe_cpu()) is ("amx_tile" in flags)


def test_the_cpu_is_named_with_its_instruction_set():
    assert torch.backends.cpu.get_cpu_capability() in machine.describe_cpu()
    regime = machine.float_regime()
    assert set(regime) == {"cpu", "capability", "threads", "mkl_cbwr", "torch"}
    assert regime["mkl_cbwr"] == os.environ.get("MKL_CBWR", "native")


def test_machine_info_names_the_libraries_threads_and_cpu():
    info = machine.machine_info("cpu")
    assert info["torch"] == torch.__version__ and info["threads"] == torch.get_num_threads()
    assert info["device"] == "cpu" and info["gpu"] is None and info["cpu_kind"] == machine.describe_cpu()
    loads = machine.load_average()
    assert loads is None or (len(loads) == 3 and all(x >= 0 for x in loads))
