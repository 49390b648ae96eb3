"""helpers.speed: the split that keeps γ selection and evaluation apart, the configurations (exact against naive),
the costs at several context lengths, the selection, and the summary and table that README and notebooks print."""

from __future__ import annotations

import json
import math

import pytest
import torch
from conftest import assert_readme_rows, random_head, readme_contents_row, verdict

from helpers import protocol, speed
from helpers.data import EVAL_PROMPTS, RESULTS, read_prompts


def test_selection_and_evaluation_prompts_never_overlap():
    selection, evaluation = speed.split(read_prompts(EVAL_PROMPTS))
    assert not set(selection) & set(evaluation)
    assert len(evaluation) >= speed.DEFAULTS["eval_prompts"] and len(selection) >= speed.DEFAULTS["select_prompts"]


def test_config_names_and_extended_contexts():
    assert speed.config_name("naive", 0, 1.0) == "naive T=1"
    assert speed.config_name("head", "dynamic", 0.0) == "head γ=dynamic T=0"
    ids, filler = torch.tensor([[1, 2, 3]]), torch.tensor([[7, 8]])
    assert speed.extended(ids, filler, 0) is ids
    assert speed.extended(ids, filler, 5).tolist() == [[1, 2, 3, 7, 8, 7, 8, 7]]


@pytest.mark.parametrize("gamma", [2, "dynamic"])
def test_every_greedy_configuration_writes_naive_text(tiny_text_pair, gamma):
    head = random_head(tiny_text_pair.expert)
    ids = torch.tensor([[2, 3, 4]])
    texts = {drafter: speed.decoder(tiny_text_pair, head, drafter, gamma, 0.0, 8)(ids, 0).new_token_ids
             for drafter in ("naive", *speed.DRAFTERS)}
    assert texts["draft"] == texts["naive"] == texts["head"]
    sampled = speed.decoder(tiny_text_pair, head, "head", gamma, 1.0, 8)
    assert sampled(ids, 5).new_token_ids == sampled(ids, 5).new_token_ids, "the seed fixes a sampled run"
    with pytest.raises(ValueError, match="unknown drafter"):
        speed.decoder(tiny_text_pair, head, "oracle", gamma, 0.0, 8)(ids, 0)


def test_context_costs_time_every_pass_at_every_context(tiny_text_pair):
    head = random_head(tiny_text_pair.expert)
    prompts = [torch.tensor([[2, 3, 4]]), torch.tensor([[5, 6, 7, 8]])]
    rows = speed.context_costs(tiny_text_pair, head, prompts, repeats=2, extras=(0, 4), max_tokens=3)
    assert [(row["prompt"], row["context"]) for row in rows] == [(0, 3), (0, 7), (1, 4), (1, 8)]
    assert set(rows[0]["seconds"]) == {"expert1", "expert2", "expert3", "draft", "head"}
    assert all(len(times) == 2 for times in rows[0]["seconds"].values())
    ratios = speed.summarise_costs(rows)
    assert set(ratios["r"]) == {0, 1, 2} and ratios["r"][0] == 1.0 and set(ratios["c"]) == set(speed.DRAFTERS)


def fake_records(n_prompts: int, *, draft_gamma: int, head_gamma, head_seconds: float) -> list[dict]:
    """naive: 1 s per 10 tokens at both temperatures; the draft 1.25 s; the head ``head_seconds``."""
    recs = []
    for i in range(n_prompts):
        for t in speed.TEMPERATURES:
            for drafter, gamma, seconds in (("naive", 0, 1.0), ("draft", draft_gamma, 1.25),
                                            ("head", head_gamma, head_seconds)):
                rounds = [] if drafter == "naive" else [[0, 0]] * (drafter == "head") + [[2, 1], [2, 0], [1, 1]]
                recs.append({"prompt": i, "round": 0, "config": speed.config_name(drafter, gamma, t),
                             "seconds": seconds * (1 + 0.01 * i), "tokens": [0] * 10, "expert_calls": len(rounds) or 10,
                             "alpha": math.nan if drafter == "naive" else 0.5, "rounds": rounds})
    return recs


def test_select_picks_each_drafters_fastest_gamma():
    recs = fake_records(3, draft_gamma=1, head_gamma=3, head_seconds=0.5)
    recs += [r for r in fake_records(3, draft_gamma=2, head_gamma="dynamic", head_seconds=0.8)
             if not r["config"].startswith("naive")]
    recs += [{**r, "seconds": 2.0} for r in fake_records(3, draft_gamma=4, head_gamma=1, head_seconds=0.9)
             if r["config"].startswith("draft")]
    assert speed.select(recs) == {"T=0": {"draft": 1, "head": 3}, "T=1": {"draft": 1, "head": 3}}
    with pytest.raises(ValueError, match="no timed runs of naive decoding and of head"):
        speed.select([r for r in recs if not r["config"].startswith("head")])


def fake_result(n_prompts: int, runs: int = 2) -> dict:
    selected = {"T=0": {"draft": 1, "head": 3}, "T=1": {"draft": 1, "head": 3}}
    rows = [{"prompt": i, "extra": 0, "context": 10,
             "seconds": {"expert1": [1.0, 1.0], "expert2": [1.5, 1.5], "expert3": [1.6, 1.6], "expert4": [1.8, 1.8],
                         "draft": [0.2, 0.2], "head": [0.1, 0.1]}} for i in range(3)]
    return {"costs": rows, "selected": selected, "evaluation_prompts": ["p"] * n_prompts,
            "selection_prompts": ["q"] * 4, "command": "python -m helpers.speed --out x.json",
            "selection_runs": [{"config": speed.config_name(d, g, t)} for d in speed.DRAFTERS for g in speed.GAMMAS
                               for t in speed.TEMPERATURES],
            "settings": {"cost_prompts": 3, "rounds": 1, "max_new_tokens": 10, "select_tokens": 8},
            "machine": {"cpu_kind": "a test CPU", "threads": 2},
            "runs": [{"run": k, "records": fake_records(n_prompts, draft_gamma=1, head_gamma=3,
                                                        head_seconds=0.5 + 0.1 * k)} for k in range(runs)]}


def test_forward_cost_by_context_gives_median_and_range_over_prompts():
    rows = fake_result(20)["costs"]
    rows[1] = {**rows[1], "extra": 32}
    rows[2] = {**rows[2], "extra": 32, "seconds": {**rows[2]["seconds"], "expert2": [2.0, 2.0]}}
    by_context = speed.forward_cost_by_context(rows)
    assert set(by_context) == {0, 32} and by_context[0][1] == (1.0, 1.0, 1.0)
    assert by_context[32][2] == pytest.approx((1.75, 1.5, 2.0)) and set(by_context[32]) == {1, 2, 3, 4}


def test_summary_pools_runs_and_explains_from_the_counted_rounds():
    s = speed.summary(fake_result(20))
    head = s["head γ=3 T=0"]
    assert head["speedup_per_run"] == pytest.approx([2.0, 1 / 0.6])
    assert head["speedup"]["pooled"].n == 20 and head["speedup"]["spread"] == pytest.approx(2.0 - 1 / 0.6)
    assert head["alpha_by_depth"] == [2 / 3, 0.0] and head["share_kept"] == pytest.approx(2 / 5)
    assert head["tokens_per_call"] == pytest.approx(10 / 4)
    rounds_cost = 1.0 + (2 * 0.1 + 1.6) * 2 + (0.1 + 1.5)  # the draft-less first round, two of γ = 2, one of γ = 1
    assert head["explained"] == pytest.approx(10 / rounds_cost)
    assert head["explained_free"] == pytest.approx(10 / (1.0 + (2 * 0.1 + 1) * 2 + (0.1 + 1))), "r = 1 everywhere"
    assert head["mean_draft"] == pytest.approx(5 / 3), "rounds that drafted: 2, 2, 1"
    assert head["model_gap"] == pytest.approx(((2.0 + 1 / 0.6) / 2) / head["explained"]), "measured / explained"
    assert s["costs"]["c"] == {"draft": pytest.approx(0.2), "head": pytest.approx(0.1)}


def test_a_whole_round_is_timed_in_naive_steps_of_the_same_timing_round():
    result = fake_result(20, runs=1)
    for rec in result["runs"][0]["records"]:  # naive: 0.5 s reading the prompt, then steps of 0.1 s
        rec["round_seconds"] = [0.5] + [0.1] * 9 if rec["config"].startswith("naive") else \
            [0.5] + [0.1 * (1 + d * 0.5) for d, _ in rec["rounds"][1:]]
    timed = speed.round_costs(result["runs"][0]["records"], "naive T=0", "head γ=3 T=0")
    assert set(timed) == {1, 2} and timed[2] == pytest.approx([2.0] * 40) and len(timed[1]) == 20, \
        "the first round (reading the prompt) is left out; each round over the same prompt's naive step"
    head = speed.summary(result)["head γ=3 T=0"]["round_cost"]
    assert head[2] == {"rounds": 40, "measured": pytest.approx(2.0), "explained": pytest.approx(2 * 0.1 + 1.6)}
    table = speed.round_cost_table(result)
    assert "| head | 0 | 3 | 2 | 40 | 2.00 | 1.80 | +0.20 |" in table and "| head | 0 | 3 | 1 |" in table
    assert speed.round_cost_table(result, min_rounds=21).count("| head |") == 2, "only d = 2 has 40 rounds"
    assert speed.round_cost_table(fake_result(20)) == "", "a file recorded before rounds were timed has none"
    two = fake_result(20, runs=2)
    for k, run in enumerate(two["runs"]):  # the second run's machine twice as slow: each run pairs within itself
        for rec, timed_rec in zip(run["records"], result["runs"][0]["records"], strict=True):
            rec["round_seconds"] = [(1 + k) * t for t in timed_rec["round_seconds"]]
    assert speed.summary(two)["head γ=3 T=0"]["round_cost"][2]["measured"] == pytest.approx(2.0)


def test_table_prints_intervals_only_from_enough_prompts():
    table = speed.markdown_table(fake_result(20))
    assert "| head | 0 | 3 | 1.83× [" in table and "(runs 2.00×, 1.67×)" in table and "a test CPU" in table
    assert "γ selected among 1..6 and dynamic on 4 other requests" in table
    few = speed.markdown_table(fake_result(3, runs=1))
    assert "no interval from fewer than 20 prompts" in few and "[" not in few.split("\n")[2]


def test_the_footer_names_the_draft_lengths_the_selection_tried():
    result = {"selection_runs": [{"config": speed.config_name("head", g, 0.0)} for g in (1, 2, 4)]}
    assert speed.tried_gammas(result) == "1, 2, 4"


def test_same_text_counts_greedy_runs_that_wrote_naive_decodings_tokens():
    result = fake_result(20)
    head = next(rec for rec in result["runs"][1]["records"] if rec["config"] == "head γ=3 T=0" and rec["prompt"] == 4)
    head["tokens"] = [1] * 10
    s = speed.summary(result)
    assert s["head γ=3 T=0"]["same_text"] == (39, 40) and s["draft γ=1 T=0"]["same_text"] == (40, 40)
    assert "same_text" not in s["head γ=3 T=1"], "sampled texts differ by design"
    assert "texts naive decoding's" not in speed.readme_row(result), "an fp32 path: identical by the exactness tests"
    result["settings"]["dtype"] = "bf16"
    row = speed.readme_row(result)
    assert "head γ = 3: " in row and "(39 of 40 texts naive decoding's)" in row
    assert "the bf16 eager path" in speed.markdown_table(result)


def test_bf16_is_refused_where_the_cpu_would_emulate_it(monkeypatch):
    with pytest.raises(ValueError, match="unknown dtype 'fp16'"):
        speed.check_dtype("fp16")
    monkeypatch.setattr(speed, "fast_bf16", lambda device: False)
    with pytest.raises(ValueError, match="no bf16 instructions"):
        speed.load("eager", "bf16")
    speed.check_dtype("fp32")


def test_readme_holds_the_rendered_row_of_every_committed_speed_file():
    assert_readme_rows("speed-*.json", speed.readme_row)


def test_another_path_is_also_timed_against_the_fp32_eager_expert_in_the_same_rounds(tiny_text_pair):
    result = fake_result(20)
    assert "versus_reference" not in speed.summary(result)["head γ=3 T=0"] and "fp32 eager expert" not in \
        speed.readme_row(result), "files without the reference print nothing for it"
    for run in result["runs"]:
        run["records"] += [{**rec, "config": speed.REFERENCE, "seconds": 3 * rec["seconds"]}
                           for rec in run["records"] if rec["config"] == "naive T=0"]
    s = speed.summary(result)
    assert s["naive T=0"]["versus_reference"]["pooled"].mean == pytest.approx(3.0)
    assert s["head γ=3 T=0"]["versus_reference"]["per_run"][0].mean == pytest.approx(6.0), "3 × the head's 2.0×"
    row = speed.readme_row(result)
    assert "over naive decoding with the fp32 eager expert in the same timing rounds: naive 3.00× [" in row
    assert "head γ=3 " in row and "fp32 eager expert" in speed.markdown_table(result)
    head = random_head(tiny_text_pair.expert)
    configs = speed.evaluation_configs(tiny_text_pair, head, result["selected"], 4, reference=tiny_text_pair)
    assert speed.REFERENCE in configs and len(configs) == 7, "the reference beside naive + 2 drafters × 2 temperatures"
    assert speed.REFERENCE not in speed.evaluation_configs(tiny_text_pair, head, result["selected"], 4)


def test_the_readme_row_names_the_notebooks_that_read_the_file():
    result = fake_result(20)
    assert speed.notebooks_reading(result) == "", "x.json: no notebook reads it"
    result["command"] = "python -m helpers.speed --out data/results/speed-epyc-avx512.json"
    assert speed.notebooks_reading(result) == "notebooks 04, 05, 07"
    assert "one protocol** (notebooks 04, 05, 07; 20 held-out" in speed.readme_row(result)


def test_the_int8_path_is_named_as_in_the_kernels_table():
    assert speed.path_name({}) == "fp32 eager"
    assert speed.path_name({"dtype": "bf16", "kernels": "eager"}) == "bf16 eager"
    assert speed.path_name({"dtype": "fp32", "kernels": "int8"}) == "int8"


def test_a_run_is_added_only_on_the_files_cpu_kind(tmp_path, monkeypatch):
    out = tmp_path / "speed.json"
    out.write_text(json.dumps({"settings": {}, "machine": {"cpu_kind": "Some CPU (AVX2)"}, "runs": []}))
    monkeypatch.setattr(protocol, "machine_info", lambda device: {"cpu_kind": "Other CPU (AVX512)"})
    monkeypatch.setattr(speed, "load", lambda *args: pytest.fail("refuse before loading the models"))
    with pytest.raises(ValueError, match=r"measured on Some CPU \(AVX2\), this machine is Other CPU"):
        speed.main(["--out", str(out), "--add-run"])


def test_held_out_coverage_counts_each_requests_greedy_text_once():
    result = fake_result(2)
    for rec in result["runs"][0]["records"]:
        rec["tokens"] = [1, 2, 3, 4] if rec["prompt"] == 0 else [5, 5, 5, 5]
    result["runs"][0]["records"] += [{**rec, "round": 1, "tokens": [9] * 4} for rec in result["runs"][0]["records"]]
    assert speed.held_out_coverage(result, torch.tensor([1, 2, 5])) == 0.75
    result["settings"]["dtype"] = "bf16"
    with pytest.raises(ValueError, match="no greedy text of the fp32 expert"):
        speed.held_out_coverage(result, torch.tensor([1, 2, 5]))
    for rec in result["runs"][0]["records"]:
        if rec["config"] == "naive T=0":
            rec["config"] = speed.REFERENCE
    assert speed.held_out_coverage(result, torch.tensor([1, 2, 5])) == 0.75


def test_paths_table_puts_each_path_beside_the_others_and_the_reference_lines_follow():
    eager, other = fake_result(20), fake_result(20)
    for run in other["runs"]:
        run["records"] += [{**rec, "config": speed.REFERENCE, "seconds": 3 * rec["seconds"]}
                           for rec in run["records"] if rec["config"] == "naive T=0"]
    lines, head_rows = speed.paths_table({"fp32 eager": eager, "int8": other})
    rows = [line for line in lines if line.startswith(("fp32 eager ", "int8 "))]
    assert len(rows) == 2 * len(speed.TEMPERATURES) * len(speed.DRAFTERS), "path × T × drafter"
    assert rows[1].startswith("fp32 eager      0  head  3 ") and "1.83× [" in rows[1], "the runs 2.0× and 1/0.6 pooled"
    assert rows[1].endswith("  109.5"), "naive decoding: 0.1 s per token × (1 + 0.01 i), its median over 20 requests"
    assert head_rows["int8", 1.0][0] == 3 and set(head_rows) == {(p, t) for p in ("fp32 eager", "int8")
                                                                 for t in speed.TEMPERATURES}
    assert sum("2 run(s) of 20 requests; γ selected on 4 other requests, 8 tokens" in line for line in lines) == 2
    (reference,) = speed.reference_lines({"fp32 eager": eager, "int8": other})
    assert reference.startswith("int8, greedy, over naive decoding with the fp32 eager expert in the same timing")
    assert reference.endswith("in those timing rounds: 328.5 ms/token (the fp32 eager file above: 109.5, its runs "
                              "pooled; each run: 109.5, 109.5)"), "3 × naive's"
    other["evaluation_prompts"] = ["another"] * 20
    with pytest.raises(AssertionError, match="the same held-out requests"):
        speed.paths_table({"fp32 eager": eager, "int8": other})


def test_the_readme_contents_quote_the_heads_protocol_run_on_the_xeon():
    """Notebook 07's contents row: "on the Xeon with bf16 and AMX, where a pass over 2 tokens costs about 1.1 steps
    (r(1) = 1.07), the head pays on the default path, 1.17× [1.12, 1.22] greedy", as the committed file says."""
    s = speed.summary(json.loads((RESULTS / "speed-xeon-bf16.json").read_text()))
    head = s[speed.config_name("head", s["selected"]["T=0"]["head"], 0.0)]["speedup"]["pooled"]
    row = readme_contents_row("07_draft_heads")
    assert f"(r(1) = {s['costs']['r'][1]:.2f}), the head pays" in row and round(s["costs"]["r"][1], 1) == 1.1
    assert f"{speed.interval_text(head)} greedy" in row and verdict(head.low, head.high) == "pays"


def test_naive_ms_per_run_is_the_median_over_requests_in_each_run():
    def run(seconds):
        return {"records": [{"prompt": i, "round": r, "config": "naive T=0", "seconds": s * (1 + r), "tokens": [0] * 10}
                            for i, s in enumerate(seconds) for r in range(3)]}
    result = {"runs": [run([0.1, 0.2, 0.3]), run([0.5, 0.5, 0.9])]}
    assert speed.naive_ms_per_run(result) == pytest.approx([40.0, 100.0]), "median round 2x, then median request"
