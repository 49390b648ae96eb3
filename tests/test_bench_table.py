"""helpers.bench_table on the committed benchmark files: a row per configuration, the per-drafter columns where
the file has them, and speed intervals only from enough prompts."""

from __future__ import annotations

import pytest
from conftest import assert_readme_rows

from helpers.bench_table import BASELINE, markdown_table, readme_cells
from helpers.data import RESULTS, read_json
from helpers.protocol import MIN_PROMPTS

BENCH_FILES = sorted(path.name for path in RESULTS.glob("bench-*.json"))


@pytest.mark.parametrize("name", BENCH_FILES)
def test_a_row_per_configuration(name):
    result = read_json(name)
    lines = markdown_table(result).splitlines()
    assert lines[0].startswith("| configuration |")
    assert sum(line.startswith(("| ours", "| HF")) for line in lines) == len(result["configurations"])
    assert any(line.startswith("- cost ratios of the pair's amateur") for line in lines)


def test_per_drafter_columns_only_where_the_file_has_every_drafters_cost():
    head = markdown_table(read_json("bench-head-xeon.json"))  # written with cost.c_by_drafter
    assert "| c | r | from counts |" in head and "every drafter's c: amateur" in head
    assert "| ours: draft head (EAGLE-style) | 2 |" in head and "| ours: prompt lookup | 4 |" in head
    older = read_json("bench-pocket-xeon.json")
    assert "c_by_drafter" not in older["cost"] and "from counts" not in markdown_table(older)


def test_intervals_only_from_enough_prompts():
    many = read_json("bench-head-xeon.json")
    assert len(many["settings"]["prompts"]) >= MIN_PROMPTS and "[95 % CI]" in markdown_table(many)
    few = read_json("bench-pocket-xeon.json")  # stored intervals from 5 prompts, written before the rule
    stored = next(row["speedup_interval"] for row in few["configurations"] if row["speedup_interval"])
    table = markdown_table(few)
    assert f"[{stored[0]:.2f}, {stored[1]:.2f}]" not in table and "no interval from 5 prompts" in table


def test_missing_comparisons_with_transformers_show_a_dash():
    table = markdown_table(read_json("bench-methods-pocket.json"))  # no HF methods were timed
    assert "naive/greedy –; speculative/assisted –" in table


def test_readme_holds_the_rendered_cells_of_every_committed_bench_file():
    assert_readme_rows("bench-*.json", readme_cells)


def test_readme_cells_name_every_configuration_and_intervals_only_from_enough_prompts():
    many, few = read_json("bench-head-xeon.json"), read_json("bench-pocket-xeon.json")
    cells = readme_cells(many)
    assert "[95 % CI]: " in cells and "draft head (EAGLE-style): γ = 2 1.24× [1.20, 1.29]" in cells
    labels = {row["label"].removeprefix("ours: ") for row in many["configurations"] if row["label"] != BASELINE}
    assert all(f"{label}: " in cells for label in labels)
    assert "[" not in readme_cells(few).split("`")[0].replace("[95 % CI]", "")
    assert "no interval from 5 prompts" in readme_cells(few) and "--no-progress" not in readme_cells(few)
    few["configurations"][1]["same_text_as_naive"] = 0.8
    assert f"of {len(few['configurations'])} configurations wrote naive decoding's text" in readme_cells(few)
