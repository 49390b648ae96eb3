"""helpers.tutorial: papermill runs every numbered notebook with the given parameters and reports."""

from __future__ import annotations

import nbformat

from helpers import tutorial


def test_runs_numbered_notebooks_with_parameters(tmp_path, monkeypatch, capsys):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("PAIR = 'pocket'", metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell("assert PAIR == 'gpt2', PAIR\nprint('pair', PAIR)")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    folder = tmp_path / "notebooks"
    folder.mkdir()
    nbformat.write(nb, folder / "00_demo.ipynb")
    nbformat.write(nb, folder / "scratch.ipynb")  # not numbered: not run
    monkeypatch.setattr(tutorial, "NOTEBOOKS", folder)
    out = tmp_path / "out"
    assert tutorial.main(["--out", str(out), "-p", "PAIR", "gpt2"]) == 0
    assert (out / "notebooks" / "00_demo.ipynb").exists()
    assert not (out / "notebooks" / "scratch.ipynb").exists()
    report = capsys.readouterr().out
    assert "| 00_demo.ipynb |" in report and "ok" in report
    # the default parameter fails the notebook's assert: reported, and the exit code says so
    assert tutorial.main(["--out", str(out)]) == 1
    assert "FAILED: AssertionError" in capsys.readouterr().out


def test_parameter_values_are_python_literals_where_possible():
    assert tutorial._literal("3") == 3 and tutorial._literal("[1, 4]") == [1, 4]
    assert tutorial._literal("gpt2") == "gpt2" and tutorial._literal("None") is None


def test_stamp_records_the_float_regime_in_the_notebook_metadata(tmp_path, monkeypatch):
    from helpers.machine import float_regime

    nb = nbformat.v4.new_notebook()
    folder = tmp_path / "notebooks"
    folder.mkdir()
    nbformat.write(nb, folder / "00_demo.ipynb")
    monkeypatch.setattr(tutorial, "NOTEBOOKS", folder)
    assert tutorial.recorded_regime(folder / "00_demo.ipynb") is None
    assert tutorial.main(["--stamp"]) == 0
    assert tutorial.recorded_regime(folder / "00_demo.ipynb") == float_regime()
    assert nbformat.read(folder / "00_demo.ipynb", as_version=4).cells == nb.cells, "only the metadata changes"
