"""The notebooks' first cell on Colab: install only what Colab lacks, and leave its own packages alone.

Colab preinstalls torch (a CUDA build on a GPU runtime), numpy, matplotlib and its own transformers. Installing
this repository's pinned ``requirements.txt`` there would replace Colab's torch with a CPU build and pull many
packages a notebook never imports. :func:`install_missing` instead installs, at the pinned version, each package
the notebooks import at run time that is missing, or (for the packages this tutorial needs new features of) older
than the pinned version. Colab's torch, numpy and matplotlib are kept whatever their version.

This module imports nothing outside the standard library at import time: it runs before anything is installed.
"""

from __future__ import annotations

import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

REQUIREMENTS = Path(__file__).resolve().parent.parent / "requirements.txt"
RUNTIME = ("torch", "numpy", "matplotlib", "transformers", "gguf", "accelerate", "safetensors", "tqdm")
"""What the notebooks import at run time (the tests, linting and JupyterLab are not needed on Colab)."""
KEEP_ANY_VERSION = frozenset({"torch", "numpy", "matplotlib"})
"""Colab's own builds: never replaced (its torch matches its GPU driver), only installed if absent."""


def pinned_versions(path: Path = REQUIREMENTS) -> dict[str, str]:
    """``name==version`` lines of requirements.txt as {name: version} (comments and blank lines skipped)."""
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            match = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([^\s;]+)", line)
            if not match:
                raise ValueError(f"{path}: expected 'name==version', got {line!r}")
            pins[match.group(1).lower()] = match.group(2)
    return pins


def _version_tuple(version: str) -> tuple[int, ...]:
    """The leading numeric release of a version (``"5.23.0.dev0"`` -> (5, 23, 0)), for an at-least comparison."""
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0])[:3])


def to_install(installed: dict[str, str | None], pins: dict[str, str]) -> list[str]:
    """The ``name==version`` specifiers to install, given {name: installed version or None} for :data:`RUNTIME`."""
    wanted = []
    for name in RUNTIME:
        have = installed.get(name)
        if have is None or (name not in KEEP_ANY_VERSION and _version_tuple(have) < _version_tuple(pins[name])):
            wanted.append(f"{name}=={pins[name]}")
    return wanted


def _installed_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def install_missing() -> list[str]:
    """Install (with this kernel's pip) what :func:`to_install` names; print what was kept and what was installed."""
    installed = {name: _installed_version(name) for name in RUNTIME}
    wanted = to_install(installed, pinned_versions())
    if wanted:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", *wanted], check=True)
    replaced = {spec.split("==")[0] for spec in wanted}
    kept = [f"{name} {version}" for name, version in installed.items() if version and name not in replaced]
    print("kept:", ", ".join(kept) or "nothing")
    print("installed:", ", ".join(wanted) or "nothing (everything was there)")
    return wanted
