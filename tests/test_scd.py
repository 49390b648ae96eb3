"""helpers.scd (notebook 08's measurements): the acceptance summary, intervals only from enough prompts, the summary
a notebook prints, the picture of one round (the timing protocol itself: tests/test_protocol.py)."""

from __future__ import annotations

import pytest
import torch
from conftest import assert_readme_rows, random_head

from helpers import scd
from helpers.decoding import speculative_contrastive
from helpers.metrics import token_nll


def test_acceptance_summary_pairs_prompts_and_skips_runs_without_drafts():
    nan = float("nan")
    per_prompt = {"draft, p": [0.5, 0.4, nan], "draft, p_cd": [0.3, 0.3, 0.2], "head, p": [0.6, 0.6, 0.6],
                  "head, p_cd": [0.5, 0.4, 0.6]}
    acceptance = {name: {"alpha_per_prompt": values} for name, values in per_prompt.items()}
    alphas, drops = scd.acceptance_summary(acceptance)
    assert alphas["draft, p"].n == 2 and alphas["draft, p"].mean == pytest.approx(0.45)
    assert drops["draft: p − p_cd"].n == 2 and drops["draft: p − p_cd"].mean == pytest.approx(0.15)
    assert drops["head: p − p_cd"].mean == pytest.approx(0.1)
    assert drops["p_cd: head − draft"].mean == pytest.approx(0.7 / 3)


def fake_result(n_prompts: int) -> dict:
    """Records in which CD takes 3 s, SCD 2 s, greedy 2.5 s per 10 tokens, the same text for CD and SCD."""
    runs = [{"prompt": i, "round": r, "config": name, "seconds": seconds * (1 + 0.01 * i), "tokens": list(range(10)),
             "expert_calls": 10 if name != "SCD" else 5, "amateur_calls": 0}
            for i in range(n_prompts) for r in range(2)
            for name, seconds in (("greedy", 2.5), ("CD", 3.0), ("SCD", 2.0), ("SCD, head", 2.2))]
    texts = [f"text number {i} about nothing in particular" for i in range(n_prompts)]
    cd_nll = [[1.5] * 6] * n_prompts  # CD ends early
    return {"prompts": texts, "runs": runs, "settings": {"gamma": 2, "head_gamma": 3},
            "costs": {"c": [0.2] * n_prompts, "r": [1.5] * n_prompts},
            "head_costs": {"c_head": [0.1] * n_prompts, "r": [1.2] * n_prompts, "contrast_pass": [0.3] * n_prompts,
                           "c": [0.25] * n_prompts},
            "decoded": {"greedy": texts, "CD": texts, "SCD": texts, "SCD, head": texts},
            "nll": {"greedy": [[0.5] * 6 + [9.0] * 4] * n_prompts, "CD": cd_nll, "SCD": cd_nll, "SCD, head": cd_nll}}


def test_summary_pairs_by_prompt_and_predicts_from_the_cost_model():
    s = scd.summary(fake_result(20))
    assert s["scd_equals_cd"] == 20
    assert s["speedup"]["SCD vs CD"].mean == pytest.approx(1.5)
    assert s["speedup"]["SCD vs greedy"].mean == pytest.approx(1.25)
    assert s["speedup"]["SCD, head vs CD"].mean == pytest.approx(3.0 / 2.2)
    assert s["tokens_per_call"] == pytest.approx(2.0)
    assert s["explained"]["SCD vs greedy"] == pytest.approx(2.0 / (2 * 0.2 + 1.5 + 0.2))
    assert s["explained"]["SCD vs CD"] == pytest.approx(2.0 * 1.2 / (2 * 0.2 + 1.5 + 0.2))
    assert s["quality"]["mean NLL"].mean == pytest.approx(1.0)  # at equal length: the first 6 tokens of each
    assert s["quality"]["mean NLL"].p_value < 1e-3 and s["quality"]["diversity"].p_value == 1.0  # sign flips
    assert s["quality"]["diversity"].mean == pytest.approx(0.0)


def test_the_heads_rows_use_the_heads_own_round_cost(tiny_text_pair):
    result = fake_result(20)
    s = scd.summary(result)
    head_round = 3 * 0.1 + 1.2 + 0.3  # γ head steps, one verification pass, the amateur's contrast pass
    assert s["head"]["tokens_per_call"] == pytest.approx(1.0), "the fake head run: 10 tokens in 10 expert calls"
    assert s["explained"]["SCD, head vs greedy"] == pytest.approx(1.0 / head_round)
    assert s["explained"]["SCD, head vs CD"] == pytest.approx(1.25 / head_round), "CD's 1 + c from the same run"
    table = scd.speed_table({**result, "settings": {**result["settings"], "cd": {"beta": 0.5}}})
    assert "| SCD (head, γ = 3) vs greedy | 1.14× [" in table and table.count("× |") == 5, "every row explained"
    sampled = scd.speed_table({**result, "settings": {**result["settings"], "cd": {"beta": 0.5}, "temperature": 1.0}})
    assert "| CD (β_CD = 0.5, T = 1) vs naive sampling (T = 1) |" in sampled, "at T = 1 'greedy' is naive sampling"
    text = scd.costs_text(result)
    assert text.startswith("2.00 tokens per expert call") and "\nhead rows: 1.00 tokens" in text
    head = random_head(tiny_text_pair.expert)
    costs = scd.head_costs(tiny_text_pair, head, [torch.tensor([[2, 3, 4, 5]])], gamma=2, repeats=2)
    assert set(costs) == {"c_head", "r", "contrast_pass", "c"} and all(len(v) == 1 and v[0] > 0 for v in costs.values())


def test_a_sampled_file_compares_each_scds_text_with_cds():
    greedy = scd.summary(fake_result(20))
    assert greedy["same_distribution"] is None, "greedy: the texts are compared token for token instead"
    result = fake_result(20)
    result["settings"]["temperature"] = 1.0
    same = scd.summary(result)["same_distribution"]
    assert set(same) == set(scd.DRAFTERS) and set(same["SCD"]) == set(scd.QUALITY_METRICS)
    assert same["SCD, head"]["mean NLL"].mean == pytest.approx(0.0) and same["SCD"]["diversity"].n == 20


def selection_records(fastest: dict[str, int]) -> list[dict]:
    """One round on 3 prompts: CD at 1 s, each drafter 0.5 s at its fastest γ and 2 s elsewhere (10 tokens each)."""
    seconds = {"CD": 1.0} | {f"{d}, γ = {g}": 0.5 if g == fastest[d] else 2.0 for d in scd.DRAFTERS for g in scd.GAMMAS}
    return [{"prompt": i, "round": 0, "config": name, "tokens": list(range(10)), "seconds": time}
            for i in range(3) for name, time in seconds.items()]


def test_the_selection_picks_each_drafters_fastest_gamma():
    records = selection_records({"SCD": 1, "SCD, head": 4})
    assert scd.chosen(records) == {"SCD": 1, "SCD, head": 4}
    table = scd.selection_table({"selection_runs": records, "selected": scd.chosen(records)})
    assert "| 1 | **2.00×** | 0.50× |" in table and "| 4 | 0.50× | **2.00×** |" in table


def test_selection_times_cd_and_every_gamma_of_both_drafters_once(tiny_text_pair):
    head = random_head(tiny_text_pair.expert)
    records = scd.select(tiny_text_pair, head, [torch.tensor([[2, 3, 4]]), torch.tensor([[5, 6]])],
                         max_new_tokens=3, temperature=1.0)
    assert len(records) == 2 * (1 + 2 * len(scd.GAMMAS)) and {r["round"] for r in records} == {0}
    assert set(scd.chosen(records).values()) <= set(scd.GAMMAS)
    with pytest.raises(ValueError, match="'greedy', 'CD' or 'SCD'"):
        scd.decoder(tiny_text_pair, head, "beam", max_new_tokens=3, temperature=0.0)


def test_likelihoods_score_each_texts_tokens_under_the_expert(tiny_text_pair):
    prompts = [torch.tensor([[1, 2, 3]]), torch.tensor([[4, 5]])]
    runs = [{"prompt": i, "round": r, "config": name, "tokens": tokens if r == 0 else [1]} for i in range(2)
            for r in range(2) for name, tokens in (("greedy", [6, 7, 8]), ("CD", [9, 10]), ("SCD", [9, 10]),
                                                   ("SCD, head", [9]))]
    nll = scd.likelihoods(tiny_text_pair, prompts, runs)
    assert [len(x) for x in nll["greedy"]] == [3, 3] and [len(x) for x in nll["CD"]] == [2, 2], "the first round's"
    assert nll["SCD"] == nll["CD"] and [len(x) for x in nll["SCD, head"]] == [1, 1]
    assert nll["CD"][1] == pytest.approx(token_nll(tiny_text_pair.expert, prompts[1], [9, 10]))


def test_no_interval_from_fewer_than_twenty_prompts():
    with pytest.raises(ValueError, match="at least 20"):
        scd.summary(fake_result(19))


def test_acceptance_of_both_drafters_on_tiny_models(tiny_text_pair):
    head = random_head(tiny_text_pair.expert, [0, 2, 3, 5, 7, 9, 10, 11], seed=4, scale=1.5)
    prompts = [torch.tensor([[1, 2, 3]]), torch.tensor([[4, 5]])]
    result = scd.acceptance(tiny_text_pair, head, prompts, gamma=2, max_new_tokens=6)
    assert set(result) == {"draft, p", "draft, p_cd", "head, p", "head, p_cd"}
    for entry in result.values():
        assert len(entry["alpha_per_prompt"]) == 2 and all(0 <= a <= 1 for a in scd.finite(entry["alpha_per_prompt"]))
        assert entry["tokens_per_call"] >= 1


def test_the_round_picture_reads_the_trace(tiny_pair, prompt):
    expert, amateur = tiny_pair
    run = speculative_contrastive(expert, amateur, prompt, max_new_tokens=4, gamma=3,
                                  generator=torch.Generator().manual_seed(1))
    it = run.trace[0]
    rows = scd.round_rows(expert, prompt, it, temperature=1.0)
    assert [row["token"] for row in rows] == it.draft
    assert [row["kind"] for row in rows][:it.n_accepted] == ["accepted"] * it.n_accepted
    assert all(0 <= row["p"] <= 1 and row["q"] > 0 for row in rows)


def test_the_readme_row_renders_every_speedup_with_its_gamma_and_command():
    result = fake_result(20)
    result |= {"command": "python -m helpers.scd --out x.json", "machine": {"cpu_kind": "a test CPU"},
               "selected": {"SCD": 2, "SCD, head": 3}, "selection_prompts": ["a"] * 10}
    result["settings"] |= {"cd": {"beta": 0.5, "alpha": 0.1}, "max_new_tokens": 10, "rounds": 2, "select_tokens": 32}
    row = scd.readme_row(result)
    assert row.startswith("| **speculative contrastive decoding** (notebook 08; β_CD = 0.5, α_CD = 0.1; 20 held-out")
    assert "(γ = 2) 1.50× [" in row and "γ selected per drafter on 10 other requests" in row
    assert row.endswith("| a test CPU | " + row.split(" | ")[2] + " | `python -m helpers.scd --out x.json` |")
    assert "α under p_cd" not in row, "no acceptance runs in this file"


def test_a_files_execution_path_is_recorded_or_the_cpu_default(tiny_text_pair):
    assert scd.execution_path(tiny_text_pair) == "fp32 eager"
    assert scd.path_of({"settings": {"path": "bf16 eager"}, "machine": {"device": "cpu"}}) == "bf16 eager"
    assert scd.path_of({"settings": {}, "machine": {"device": "cpu"}}) == "fp32 eager", "load_pair's CPU default"
    with pytest.raises(ValueError, match="measure it anew"):
        scd.path_of({"settings": {}, "machine": {"device": "cuda"}})


def test_readme_holds_the_rendered_row_of_every_committed_scd_file():
    assert_readme_rows("scd-*.json", scd.readme_row)
