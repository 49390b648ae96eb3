"""helpers.quality on the tiny models with a word tokenizer: rows, summaries, table and the command line."""

from __future__ import annotations

import json
import math

import pytest

from helpers import quality
from helpers.quality import DEFAULT_METHODS, METHODS, evaluate, markdown_table, summary


@pytest.fixture
def rows(tiny_text_pair):
    return evaluate(tiny_text_pair, ["w1 w2 w3", "w4 w5"], samples=2, max_new_tokens=6, progress=False)


def test_every_method_writes_the_right_number_of_samples(rows):
    counts = {m: sum(r["method"] == m for r in rows) for m in DEFAULT_METHODS}
    assert counts == {"sampling T=1": 4, "greedy": 2, "top-p 0.95": 4, "contrastive α=0.1": 2}
    for row in rows:
        assert 0 < row["n_tokens"] <= 6
        assert 0 <= row["diversity"] <= 1 and row["perplexity"] > 0
        assert row["with_prompt"]["entropy-1"] >= 0


def test_rows_carry_the_per_token_nll_and_its_mean(rows):
    for row in rows:
        assert len(row["nll"]) == row["n_tokens"]
        assert row["mean NLL"] == pytest.approx(sum(row["nll"]) / row["n_tokens"], abs=1e-5)
        assert row["perplexity"] == pytest.approx(math.exp(row["mean NLL"]))


def test_rescore_adds_the_nll_to_rows_recorded_without_it(tiny_text_pair, rows, tmp_path, monkeypatch):
    old = [{k: v for k, v in r.items() if k not in ("nll", "mean NLL")} for r in rows]
    result = {"settings": {"pair": "tiny"}, "sets": {"p.txt": {"rows": old, "summary": summary(old)}}}
    assert "mean NLL" not in result["sets"]["p.txt"]["summary"]["greedy"]
    path = tmp_path / "q.json"
    path.write_text(json.dumps(result))
    monkeypatch.setattr(quality, "load_pair", lambda name: tiny_text_pair)
    done = quality.rescore_file(path, progress=False)
    assert done["rows_reproducing_the_recorded_perplexity"] == done["rows"] == len(rows)  # words round-trip
    again = json.loads(path.read_text())
    assert [r["nll"] for r in again["sets"]["p.txt"]["rows"]] == [r["nll"] for r in rows]
    assert "mean NLL" in again["sets"]["p.txt"]["summary"]["greedy"] and "rescore" in again["rescored"]["command"]
    with pytest.raises(FileNotFoundError, match="no such result file"):
        quality.rescore_file(tmp_path / "missing.json")


def test_sampled_rows_differ_by_seed_and_rerun_identically(tiny_text_pair, rows):
    again = evaluate(tiny_text_pair, ["w1 w2 w3", "w4 w5"], samples=2, max_new_tokens=6, progress=False)
    assert [r["text"] for r in again] == [r["text"] for r in rows]
    sampled = [r["text"] for r in rows if r["method"] == "sampling T=1"]
    assert len(set(sampled)) > 1


def test_summary_and_table(rows):
    table = summary(rows)
    assert set(table) == set(DEFAULT_METHODS)
    mean, std = table["greedy"]["diversity"]
    assert 0 <= mean <= 1 and std >= 0 and not math.isnan(mean)
    text = markdown_table(table)
    assert text.splitlines()[0].startswith("| metric | sampling T=1")
    assert "| perplexity |" in text and " ± " in text
    means = markdown_table(table, spread=False)
    assert " ± " not in means and means.splitlines()[:2] == text.splitlines()[:2]
    assert set(summary(rows, with_prompt=True)["greedy"]) >= {"entropy-1", "diversity"}


def test_one_model_methods_of_notebook_06(tiny_text_pair):
    rows = evaluate(tiny_text_pair, ["w1 w2 w3"], max_new_tokens=5, methods=["contrastive search", "DoLa"],
                    progress=False)
    assert [r["method"] for r in rows] == ["contrastive search", "DoLa"]
    assert all(0 < r["n_tokens"] <= 5 for r in rows)


@pytest.mark.pocket
def test_contrastive_decoding_with_the_early_exit_amateur(pocket):
    name = "contrastive α=0.1 (early-exit amateur)"
    rows = evaluate(pocket, ["The capital of France is"], max_new_tokens=4, methods=[name], progress=False)
    assert rows[0]["method"] == name and 0 < rows[0]["n_tokens"] <= 4
    assert name in METHODS and name not in DEFAULT_METHODS


def test_bad_arguments(tiny_text_pair):
    with pytest.raises(ValueError, match="unknown methods"):
        evaluate(tiny_text_pair, ["w1"], methods=["beam"])
    with pytest.raises(ValueError, match="samples"):
        evaluate(tiny_text_pair, ["w1"], samples=0)


def test_command_line_writes_json(tiny_text_pair, tmp_path, monkeypatch, capsys):
    prompts = tmp_path / "p.txt"
    prompts.write_text("w1 w2\nw3\n\nw4\n")
    asked = []
    monkeypatch.setattr(quality, "load_pair", lambda name, amateur: asked.append(amateur) or tiny_text_pair)
    out = tmp_path / "q.json"
    quality.main(["--prompts", str(prompts), "--quick", "--out", str(out)])
    quality.main(["--prompts", str(prompts), "--quick", "--amateur", "early-exit", "--out", str(tmp_path / "e.json")])
    assert asked == [None, "early-exit"], "--amateur reaches load_pair (the committed quality-pocket.json used it)"
    result = json.loads(out.read_text())
    assert result["settings"]["samples"] == 1 and result["settings"]["max_new_tokens"] == 24
    assert {r["prompt"] for r in result["sets"]["p.txt"]["rows"]} == {"w1 w2", "w3"}  # --quick: 2 prompts
    assert result["machine"]["cpu_kind"] and result["machine"]["threads"] >= 1  # which CPU wrote the texts
    assert "### p.txt" in capsys.readouterr().out


def test_command_line_refuses_unknown_methods(capsys):
    with pytest.raises(SystemExit):
        quality.main(["--methods", "greedy,beam search"])
    assert "unknown --methods" in capsys.readouterr().err
