"""The notebooks' form: parameters cell, Colab badge and setup cell, executed and clean, and reference solutions
that pass their own self-checks. (nbval executes the notebooks themselves; see README.)"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import re
from pathlib import Path

import pytest
import torch

import helpers
from helpers.tutorial import numbered_notebooks

NOTEBOOKS = numbered_notebooks()


def cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def source(cell: dict) -> str:
    return "".join(cell["source"])


def test_there_are_numbered_notebooks():
    assert [p.name[:2] for p in NOTEBOOKS] == [f"{i:02d}" for i in range(len(NOTEBOOKS))]
    assert len(NOTEBOOKS) >= 4


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_form(path):
    nb = cells(path)
    params = [c for c in nb if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(params) == 1 and 'PAIR = "pocket"' in source(params[0]), "one papermill parameters cell"
    assert f"colab.research.google.com/github/{helpers.REPO_URL.removeprefix('https://github.com/')}" \
           f"/blob/main/notebooks/{path.name}" in source(nb[0]), "Colab badge pointing at this notebook"
    setup = source(nb[1])
    assert "google.colab" in setup and helpers.REPO_URL in setup, "the Colab setup cell comes first"
    code = [c for c in nb if c["cell_type"] == "code" and source(c).strip()]
    assert all(c["execution_count"] is not None for c in code), "committed executed"
    assert not any("execution" in c.get("metadata", {}) for c in code), "clean metadata (nbstripout)"
    assert any("assert " in source(c) for c in code), "claims are checked by asserts"


def test_nbval_compares_outputs_from_another_float_regime():
    """The committed outputs were computed with MKL's native kernels (``make notebooks`` stamps the regime); nbval
    re-runs every notebook under another MKL code path (tests/conftest.py, helpers.cbwr), whose rounding differs
    (tests/test_cbwr.py): every passing nbval run shows that what it compares survives another CPU's rounding."""
    from helpers.machine import float_regime
    from helpers.tutorial import recorded_regime

    here = float_regime()
    for path in NOTEBOOKS:
        recorded = recorded_regime(path)
        assert recorded is not None, f"{path.name}: no recorded float regime; execute it with `make notebooks`"
        assert recorded["mkl_cbwr"] == "native" != here["mkl_cbwr"], (path.name, recorded, here)


def test_setup_cells_are_identical():
    assert len({source(cells(p)[1]) for p in NOTEBOOKS}) == 1


def exercises() -> list[tuple[str, str, str]]:
    """(notebook, check call, reference solution) for every self-checked exercise."""
    found = []
    for path in NOTEBOOKS:
        nb = cells(path)
        for i, cell in enumerate(nb):
            call = re.search(r"^check_\w+\(.*\)$", source(cell), re.M) if cell["cell_type"] == "code" else None
            if call:
                solution = re.search(r"<details>.*?```python\n(.*?)```", source(nb[i + 1]), re.S)
                assert solution, f"{path.name}: the exercise before cell {i + 1} needs a reference solution"
                found.append((path.name, call.group(0), solution.group(1)))
    return found


@pytest.mark.parametrize(("notebook", "call", "solution"), exercises(), ids=lambda v: str(v)[:40])
def test_reference_solutions_pass_their_checks(notebook, call, solution):
    import helpers.exercises

    namespace = {"torch": torch, **vars(helpers.exercises)}
    exec(solution, namespace)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(call, namespace)
    assert "✅" in out.getvalue(), f"{notebook}: {call} -> {out.getvalue()}"


def test_placeholders_do_not_pass():
    import helpers.exercises

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        helpers.exercises.check_alpha_for_greedy(None)
    assert "not attempted" in out.getvalue()
    with pytest.raises(AssertionError, match="V_head"):
        helpers.exercises.check_alpha_for_greedy(0.5)


def short_path(nb: list[dict]) -> tuple[list[str], list[str]]:
    """(code of the short path, code of the rest): the short path is every code cell before the first ``##``
    section (title, setup, parameters) plus the sections whose heading is marked ⏱; a ``###`` section belongs to
    the short path only when its own heading is marked (README, "Running a workshop"), so the cells of a ``##``
    section marked ⏱ that stand after an unmarked ``###`` heading are reading for later. Headings count wherever they
    stand in a markdown cell, not only at its start."""
    short: list[str] = []
    rest: list[str] = []
    marked = True
    for cell in nb:
        text = source(cell)
        if cell["cell_type"] == "markdown":
            for heading in re.findall(r"^#{2,3} .*$", text, re.M):
                marked = "⏱" in heading
        elif cell["cell_type"] == "code":
            (short if marked else rest).append(text)
    return short, rest


def assigned(tree: ast.AST) -> set[str]:
    """Every name a cell binds anywhere (assignments, loops, imports, definitions, arguments)."""
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store | ast.Del)}
    names |= {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    names |= {n.arg for n in ast.walk(tree) if isinstance(n, ast.arg)}
    names |= {(a.asname or a.name).split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)
              for a in n.names}
    return names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_the_short_path_stands_alone(path):
    """A workshop runs only the ⏱ sections (README, "Workshop"): no cell on that path may read a name that only a
    skipped section defines (notebook 07 once read the model card's agreement from a skipped cell)."""
    def parse(code: str) -> ast.AST:
        return ast.parse("\n".join(line for line in code.splitlines() if not line.lstrip().startswith(("%", "!"))))

    short, rest = short_path(cells(path))
    only_skipped = set().union(*(assigned(parse(code)) for code in rest))
    defined: set[str] = set()
    for code in short:
        tree = parse(code)
        defined |= assigned(tree)
        read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        missing = (read & only_skipped) - defined
        assert not missing, f"{path.name}: a ⏱ cell reads {sorted(missing)}, defined only in a skipped section:\n{code}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_exercise_cell_imports_its_own_checker(path):
    """A facilitator may assign any one exercise: its cell must not rely on an earlier exercise's import."""
    for cell in cells(path):
        text = source(cell)
        for name in re.findall(r"^(check_\w+)\(", text, re.M) if cell["cell_type"] == "code" else []:
            assert re.search(rf"^from helpers\.exercises import .*\b{name}\b", text, re.M), f"{path.name}: {name}"
