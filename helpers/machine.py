"""What machine this is, as far as speed and float rounding go: the CPU's name and instruction set, whether it
has fast bf16 arithmetic, and the floating-point regime that the notebooks' outputs were computed under.

"AMD EPYC" alone is not a CPU kind: the same name has covered an AVX2-only Zen 3 and a part with AVX-512 and
bf16 instructions, with different speeds and rounding. :func:`describe_cpu` names both the model and the
instruction set.
"""

from __future__ import annotations

import os
import platform
from functools import cache
from pathlib import Path

import torch
import transformers

FAST_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
"""CPU flags (``/proc/cpuinfo``) of hardware bf16 arithmetic. Without them oneDNN emulates bf16 matrix products,
and bf16 autocast costs time instead of saving it. Measured with ``python -m helpers.distill --time-precision``
(one run each, one AMD EPYC with avx512_bf16 whose oneDNN was limited by ``ONEDNN_MAX_CPU_ISA`` to play the
other kinds; ``data/results/precision-epyc-avx512-bf16.json``), one training step of notebook 05's student:
bf16 0.58 s vs fp32 0.76 s with bf16 instructions, 1.10 s vs 0.68 s with AVX-512 but without them (an Intel Xeon
without AMX), 27 s vs 0.71 s with AVX2 only (an AMD EPYC Zen 3)."""


@cache
def _cpuinfo() -> dict[str, str]:
    """The first processor's ``/proc/cpuinfo`` entries (empty where there is no such file)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    entries = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(":")
        entries[key.strip()] = value.strip()
    return entries


def cpu_name() -> str | None:
    """The CPU's model name, e.g. ``"AMD EPYC"`` or ``"Intel(R) Xeon(R) Processor @ 2.60GHz"``."""
    return _cpuinfo().get("model name") or platform.processor() or None


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (``avx2``, ``avx512f``, ``avx512_bf16``, ...); empty where unknown."""
    return frozenset(_cpuinfo().get("flags", "").split())


def describe_cpu() -> str:
    """Model and instruction set in a few words, e.g. ``"AMD EPYC (AVX512, bf16)"``, ``"AMD EPYC (AVX2)"`` or
    ``"Intel(R) Xeon(R) Processor (AVX512, bf16, AMX)"`` (AMX: Intel's matrix tiles, ``amx_tile``)."""
    extras = ", bf16" if cpu_fast_bf16() else ""
    extras += ", AMX" if "amx_tile" in cpu_flags() else ""
    return f"{cpu_name() or 'unknown CPU'} ({torch.backends.cpu.get_cpu_capability()}{extras})"


def cpu_fast_bf16() -> bool:
    """True where the CPU computes bf16 in hardware (:data:`FAST_BF16_FLAGS`)."""
    return any(flag in cpu_flags() for flag in FAST_BF16_FLAGS)


def fast_bf16(device: torch.device | str) -> bool:
    """Whether bf16 autocast is the fast path for training on ``device``: a CUDA GPU with bf16 support, or a CPU
    with hardware bf16 (:func:`cpu_fast_bf16`). Everywhere else fp32 is faster (and exact to fp32)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return device.type == "cpu" and cpu_fast_bf16()


def float_regime() -> dict[str, object]:
    """What decides this process's float rounding: the CPU, torch's kernel set, the threads, MKL's code path.

    ``mkl_cbwr`` is MKL's conditional numerical reproducibility setting: ``"native"`` when unset (MKL picks the
    kernels of this CPU), else the code path it pins, e.g. the one the test suite runs under (:mod:`helpers.cbwr`).
    """
    return {"cpu": describe_cpu(), "capability": torch.backends.cpu.get_cpu_capability(),
            "threads": torch.get_num_threads(), "mkl_cbwr": os.environ.get("MKL_CBWR", "native"),
            "torch": torch.__version__}


def load_average() -> list[float] | None:
    """1, 5 and 15 minute load averages (None where the OS has none): well above a run's own thread count, other
    processes shared the CPU."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def machine_info(device: torch.device | str) -> dict:
    """Library versions, threads, CPU model and device: the ``machine`` entry of every result file."""
    device = torch.device(device)
    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "cpu": cpu_name(),
        "cpu_kind": describe_cpu(),
        "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
    }
