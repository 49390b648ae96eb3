"""helpers.sidebyside: every drafter exact against naive decoding, the costs, the selection on other requests, and
the summary, table and README row of notebook 07's side-by-side protocol file."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import assert_readme_rows, random_head, readme_contents_row, verdict

from helpers import sidebyside
from helpers.data import RESULTS
from helpers.models import self_draft
from helpers.speed import DYNAMIC_MAX, config_name, interval_text


@pytest.mark.parametrize("gamma", [1, 4])
def test_every_drafter_writes_greedy_decodings_text(tiny_text_pair, gamma):
    head, fp16 = random_head(tiny_text_pair.expert), self_draft(tiny_text_pair.expert)
    ids = torch.tensor([[2, 3, 4, 2, 3]])
    texts = {d: sidebyside.drafter_decoder(tiny_text_pair, head, fp16, d, gamma, 10)(ids, 0).new_token_ids
             for d in ("naive", *sidebyside.DRAFTERS)}
    assert all(text == texts["naive"] for text in texts.values()), texts
    with pytest.raises(ValueError, match="unknown drafter 'oracle'"):
        sidebyside.drafter_decoder(tiny_text_pair, head, fp16, "oracle", gamma, 10)


def test_costs_give_every_drafters_c_and_r_up_to_the_longest_draft(tiny_text_pair):
    head, fp16 = random_head(tiny_text_pair.expert), self_draft(tiny_text_pair.expert)
    rows = sidebyside.costs(tiny_text_pair, head, fp16, [torch.tensor([[2, 3, 4]])], repeats=2)
    longest = max(g for gammas in sidebyside.CANDIDATES.values() for g in gammas if g != "dynamic")
    assert set(rows[0]["c"]) == set(sidebyside.DRAFTERS)
    assert set(rows[0]["r"]) == {str(d) for d in range(max(longest, DYNAMIC_MAX) + 1)}, "r of every candidate γ"


def records(n_prompts: int, seconds: dict[str, float], run: int = 0) -> list[dict]:
    """One timing round per prompt; 10 tokens each; the drafters keep one of two drafted tokens per round."""
    out = []
    for i in range(n_prompts):
        for name, s in seconds.items():
            drafting = not name.startswith("naive")
            out.append({"prompt": i, "round": 0, "config": name, "seconds": s * (1 + 0.01 * i + 0.02 * run),
                        "tokens": [1] * 10, "expert_calls": 5 if drafting else 10, "alpha": 0.5 if drafting else None,
                        "rounds": [[2, 1]] * 5 if drafting else []})
    return out


SELECTED = {"draft": 1, "head": "dynamic", "self-draft": 4, "lookup": 2}


def fake_result(n_prompts: int, runs: int = 2) -> dict:
    seconds = {sidebyside.NAIVE: 1.0, **{config_name(d, g, 0.0): 0.8 for d, g in SELECTED.items()}}
    cost = {"c": {"draft": 0.12, "head": 0.07, "self-draft": 0.95, "lookup": 0.0003},
            "r": {str(d): 1 + 0.1 * d for d in range(1, 7)}}
    return {"command": "python -m helpers.sidebyside --out x.json", "selected": SELECTED, "costs": [cost] * 3,
            "evaluation_prompts": ["p"] * n_prompts, "selection_prompts": ["q"] * 8,
            "settings": {**sidebyside.DEFAULTS, "eval_prompts": n_prompts, "candidates": sidebyside.CANDIDATES},
            "machine": {"cpu_kind": "a test CPU", "threads": 2},
            "runs": [{"run": k, "records": records(n_prompts, seconds, k)} for k in range(runs)]}


def test_select_picks_each_drafters_fastest_gamma():
    timed = {sidebyside.NAIVE: 1.0}
    for drafter, gammas in sidebyside.CANDIDATES.items():
        timed |= {config_name(drafter, g, 0.0): 0.9 if g == SELECTED[drafter] else 1.1 for g in gammas}
    assert sidebyside.select(records(3, timed)) == SELECTED
    with pytest.raises(ValueError, match="no timed runs of naive decoding and of lookup"):
        sidebyside.select([r for r in records(3, timed) if not r["config"].startswith("lookup")])


def test_summary_pools_runs_and_counts_rounds():
    s = sidebyside.summary(fake_result(20))
    head = s["head"]
    assert head["speedup"]["pooled"].mean == pytest.approx(1.25, rel=0.02) and len(head["speedup"]["per_run"]) == 2
    assert (head["alpha"], head["kept"], head["tokens_per_call"]) == (0.5, 0.5, 2.0)
    assert head["same_text"] == (40, 40) and head["c"] == 0.07 and head["r"] == pytest.approx(1.6), "r(6): dynamic"
    assert s["lookup"]["r"] == pytest.approx(1.2) and s["draft"]["r"] == pytest.approx(1.1)


def test_a_whole_round_is_timed_in_naive_steps_of_the_same_timing_round():
    result = fake_result(20)
    assert sidebyside.round_cost_table(result) == "", "a file recorded before rounds were timed has none"
    for run in result["runs"]:  # naive: 0.5 s reading the prompt, then steps of 0.1 s; every drafting round 0.25 s
        for rec in run["records"]:
            rec["round_seconds"] = [0.5] + ([0.1] * 9 if rec["config"] == sidebyside.NAIVE else [0.25] * 4)
    head = sidebyside.summary(result)["head"]["round_cost"]
    assert head == {2: {"rounds": 160, "measured": pytest.approx(2.5), "explained": pytest.approx(2 * 0.07 + 1.2)}}, \
        "the first round (reading the prompt) left out; 4 rounds × 20 requests × 2 runs"
    table = sidebyside.round_cost_table(result)
    assert "| draft head | dynamic | 2 | 160 | 2.50 | 1.34 | +1.16 |" in table and table.count("\n") == 5
    assert sidebyside.round_cost_table(result, min_rounds=161) == ""
    head_row = sidebyside.summary(result)["head"]  # the rule of thumb: tokens per expert call / mean timed round
    assert sidebyside.mean_round(head_row) == pytest.approx(2.5)
    assert sidebyside.thumb_text("head", head_row).startswith("draft head 2.00 / 2.50 = 0.80× (measured 1.2")


def test_the_table_prints_intervals_only_from_enough_requests():
    assert "[" in sidebyside.markdown_table(fake_result(20)).split("\n")[2]
    few = sidebyside.markdown_table(fake_result(3, runs=1))
    assert "no interval: fewer than 20 requests" in few and "× 1 run;" in few
    assert "| fp16 self-draft | 4 |" in few and "| 0.0003 |" in few


def test_a_grounded_file_names_its_requests_and_notebook_06():
    result = fake_result(20)
    assert "(notebook 07; 20 held-out chat requests," in sidebyside.readme_row(result), "files without 'prompts'"
    result["settings"]["prompts"] = "grounded"
    assert "(notebook 06; 20 held-out input-grounded requests," in sidebyside.readme_row(result)
    assert "- 20 held-out input-grounded requests (chat template" in sidebyside.markdown_table(result)


def test_readme_holds_the_rendered_row_of_every_committed_sidebyside_file():
    assert_readme_rows("sidebyside-*.json", sidebyside.readme_row)


def test_the_fastest_drafters_lead_is_paired_by_request():
    result = fake_result(20)
    for run in result["runs"]:
        for rec in run["records"]:
            rec["seconds"] *= 0.5 if rec["config"].startswith("head") else 1
    line = sidebyside.markdown_table(result).splitlines()[-1]
    assert line.startswith("- the fastest, draft head,") and "over prompt lookup 2.00× [2.00, 2.00]" in line
    assert sidebyside.over(result, "lookup", "head")["pooled"].mean == pytest.approx(2.0)
    assert "the fastest" not in sidebyside.markdown_table(fake_result(3))


@pytest.mark.parametrize(("name", "verdicts"), [
    # README: "on an Intel Xeon with bf16 and AMX the head is the fastest, ... prompt lookup gains a little (its
    # interval lies above 1), the distilled draft is not resolved from 1, the fp16 copy loses"
    ("sidebyside-xeon-bf16.json", {"head": "pays", "lookup": "pays", "draft": "not resolved", "self-draft": "loses"}),
    # README: "the fp16 copy is the fastest and the only drafter that pays, ... the head and the distilled draft
    # lose, prompt lookup is not resolved from 1"
    ("sidebyside-epyc-avx512.json",
     {"self-draft": "pays", "head": "loses", "draft": "loses", "lookup": "not resolved"}),
])
def test_the_readme_contents_quote_each_cpus_chat_file(name, verdicts):
    """Notebook 07's contents row types each CPU's fastest drafter (interval and γ), that it leads every other drafter
    paired by request, and every drafter's verdict: all as the committed file says."""
    result = json.loads((RESULTS / name).read_text())
    rows = sidebyside.summary(result)
    best = max(rows, key=lambda d: rows[d]["speedup"]["pooled"].mean)
    assert f"{interval_text(rows[best]['speedup']['pooled'])} at γ = {rows[best]['gamma']}" in readme_contents_row(
        "07_draft_heads"), f"README contents: quote {name}'s fastest drafter again"
    assert all(sidebyside.over(result, d, best)["pooled"].low > 1 for d in rows if d != best), "ahead of every other"
    assert {d: verdict(e["speedup"]["pooled"].low, e["speedup"]["pooled"].high) for d, e in rows.items()} == verdicts
