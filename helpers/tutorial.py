"""``python -m helpers.tutorial`` (``make tutorial``): execute every numbered notebook headless with papermill.

Executed copies go to ``OUT/notebooks``, figures to ``OUT/figures``; the notebooks in ``notebooks/`` are not
changed. Parameters can be passed to every notebook, e.g. ``-p PAIR gpt2`` on a machine with hub access.

``python -m helpers.tutorial --stamp`` (the last step of ``make notebooks``) records in every committed notebook's
metadata the floating-point regime its outputs were computed under (:func:`helpers.machine.float_regime`); the
test suite checks that nbval re-runs them under another one (``tests/conftest.py``).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
import time
from pathlib import Path

import papermill

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO / "notebooks"


def numbered_notebooks() -> list[Path]:
    return sorted(p for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def recorded_regime(notebook: Path) -> dict[str, object] | None:
    """The :func:`~helpers.machine.float_regime` that a committed notebook's outputs were recorded under (None: the
    notebook was never stamped)."""
    return json.loads(notebook.read_text()).get("metadata", {}).get("big_small", {}).get("recorded_under")


def stamp(notebooks: list[Path]) -> None:
    """Record this process's :func:`~helpers.machine.float_regime` in each notebook's metadata (run right after
    executing them, on the same machine and environment)."""
    from helpers.machine import float_regime

    regime = float_regime()
    for notebook in notebooks:
        nb = json.loads(notebook.read_text())
        nb.setdefault("metadata", {})["big_small"] = {"recorded_under": regime}
        notebook.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    print(f"stamped {len(notebooks)} notebooks: {regime}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "output", help="output folder (default: output/)")
    parser.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                        help="a notebook parameter, e.g. -p PAIR gpt2 (values are parsed as Python literals "
                             "where possible)")
    parser.add_argument("--only", default="", help="run only notebooks whose name contains this text")
    parser.add_argument("--stamp", action="store_true",
                        help="execute nothing: record this machine's float regime in the committed notebooks")
    args = parser.parse_args(argv)
    if args.stamp:
        stamp([nb for nb in numbered_notebooks() if args.only in nb.name])
        return 0
    parameters = {name: _literal(value) for name, value in args.parameter}
    out_notebooks, figures = args.out / "notebooks", args.out / "figures"
    out_notebooks.mkdir(parents=True, exist_ok=True)
    os.environ["BIG_SMALL_FIGURES"] = str(figures.resolve())
    rows, failed = [], False
    for notebook in numbered_notebooks():
        if args.only not in notebook.name:
            continue
        start = time.perf_counter()
        status = "ok"
        try:
            papermill.execute_notebook(notebook, out_notebooks / notebook.name, parameters=parameters,
                                       cwd=str(NOTEBOOKS), progress_bar=False, kernel_name="python3")
        except papermill.PapermillExecutionError as error:
            status, failed = f"FAILED: {error.ename}: {error.evalue}"[:200], True
        rows.append((notebook.name, time.perf_counter() - start, status))
        print(f"{notebook.name}: {rows[-1][1]:.0f} s, {status}", flush=True)
    print("\n| notebook | seconds | status |\n|---|---:|---|")
    for name, seconds, status in rows:
        print(f"| {name} | {seconds:.0f} | {status} |")
    print(f"\nExecuted notebooks: {out_notebooks.resolve()}")
    n_figures = len(list(figures.glob("*.png"))) if figures.exists() else 0
    print(f"Figures ({n_figures}): {figures.resolve()}")
    return 1 if failed else 0


def _literal(value: str) -> object:
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return value


if __name__ == "__main__":
    sys.exit(main())
