"""helpers.bench on tiny random models: the structure of the result, N tokens from every method, finite ratios,
and the command line. No wall-clock assertions."""

from __future__ import annotations

import json
import math
import statistics
from types import SimpleNamespace

import pytest
import torch
from conftest import VOCAB, tiny_llama

from helpers import bench, bench_configs
from helpers.bench import run_benchmark
from helpers.heads import DraftHead
from helpers.models import Pair

N = 6
GAMMAS = [1, 3]
REPEATS = 2
PROMPTS = [torch.tensor([[1, 2, 3]]), torch.tensor([[4, 5, 6, 7]])]


class FakeTokenizer:
    """Just enough of a tokenizer for ``Pair.encode``: one token per character."""

    eos_token_id = None

    def __call__(self, text: str, return_tensors: str = "pt") -> SimpleNamespace:
        assert return_tensors == "pt"
        return SimpleNamespace(input_ids=torch.tensor([[1 + ord(ch) % (VOCAB - 2) for ch in text]]))


@pytest.fixture(scope="module")
def pair():
    """The tiny pair, run on one thread (no OpenMP hand-offs for 16x16 matrices)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield Pair(expert=tiny_llama(0, layers=2), amateur=tiny_llama(1), tokenizer=FakeTokenizer(), name="tiny",
               expert_name="tiny-2-layers", amateur_name="tiny-1-layer", source="test")
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def result(pair) -> dict:
    return run_benchmark(pair, PROMPTS, GAMMAS, repeats=REPEATS, max_new_tokens=N, temperature=0.0, seed=0,
                         progress=False)


def rows(result: dict) -> dict[str, dict]:
    return {row["name"]: row for row in result["configurations"]}


def test_every_configuration_is_there(result):
    expected = ["naive", "naive_nocache", "hf_greedy"]
    for gamma in GAMMAS:
        expected += [f"speculative_g{gamma}", f"hf_assisted_g{gamma}"]
    assert [row["name"] for row in result["configurations"]] == expected
    assert {"machine", "settings", "cost", "alpha_t1", "configurations", "ratios", "command", "wall_s"} <= set(result)
    assert result["machine"]["device"] == "cpu" and result["machine"]["threads"] >= 1
    assert result["settings"]["prompts"] == [p[0].tolist() for p in PROMPTS]


def test_every_method_produces_n_tokens_and_the_same_greedy_text(result):
    for row in result["configurations"]:
        assert row["new_tokens"] == [N], row["name"]
        assert row["same_text_as_naive"] == 1.0, row["name"]  # temperature 0: only the time differs


def test_timings_and_ratios_are_positive_and_finite(result):
    def finite_positive(x: float) -> bool:
        return 0 < x < math.inf

    for row in result["configurations"]:
        t = row["per_token_s"]
        assert t["n"] == REPEATS * len(PROMPTS)
        assert 0 < t["min"] <= t["median"] <= t["max"] < math.inf
        assert finite_positive(row["speedup_vs_naive"])
    assert rows(result)["naive"]["speedup_vs_naive"] == 1.0
    ratios = result["ratios"]
    assert finite_positive(ratios["ours_naive_over_hf_greedy"])
    assert list(ratios["ours_speculative_over_hf_assisted"]) == GAMMAS
    assert all(finite_positive(v) for v in ratios["ours_speculative_over_hf_assisted"].values())
    assert finite_positive(result["cost"]["c"])
    assert list(result["cost"]["r"]) == GAMMAS and all(finite_positive(v) for v in result["cost"]["r"].values())


def test_every_raw_time_is_kept(result):
    raw = result["raw_seconds"]
    assert len(raw) == len(PROMPTS), "one entry per prompt"
    names = {row["name"] for row in result["configurations"]}
    assert all(set(per_prompt) == names and all(len(t) == REPEATS for t in per_prompt.values()) for per_prompt in raw)
    per_token = [t / N for per_prompt in raw for t in per_prompt["naive"]]
    assert statistics.median(per_token) == pytest.approx(rows(result)["naive"]["per_token_s"]["median"])


def test_speculative_statistics(result):
    for gamma in GAMMAS:
        row = rows(result)[f"speculative_g{gamma}"]
        assert row["gamma"] == gamma
        assert 0 <= row["alpha"] <= 1
        assert 0 <= row["share_kept"] <= row["alpha"]  # accepted/proposed <= accepted/judged
        assert 1 <= row["tokens_per_expert_call"] <= gamma + 1
        assert 1 <= row["expected_tokens_per_call"] <= gamma + 1
        assert 0 < row["predicted_speedup"] < math.inf and 0 < row["predicted_speedup_t1"] < math.inf
    alpha_t1 = result["alpha_t1"]
    assert 0 <= alpha_t1["alpha"] <= 1 and alpha_t1["n_positions"] > 0 and alpha_t1["gamma"] == max(GAMMAS)


def test_sampling_also_produces_n_tokens(pair):
    sampled = run_benchmark(pair, PROMPTS[:1], [2], repeats=1, max_new_tokens=N, temperature=1.0, seed=3,
                            progress=False)
    for row in sampled["configurations"]:
        assert row["new_tokens"] == [N], row["name"]
    assert "temperature 1" in sampled["alpha_source"]


def test_a_busy_machine_is_warned_about(pair, monkeypatch):
    import helpers.timing

    monkeypatch.setattr(helpers.timing, "others_busy_cores", lambda window: 1.5)
    with pytest.warns(RuntimeWarning, match="machine is busy"):
        run_benchmark(pair, PROMPTS[:1], [1], repeats=1, max_new_tokens=2, temperature=0.0, progress=False,
                      methods=["naive"])


def test_refuses_bad_arguments(pair):
    with pytest.raises(ValueError, match="gammas"):
        run_benchmark(pair, PROMPTS, [0], progress=False)
    with pytest.raises(ValueError, match="prompt"):
        run_benchmark(pair, [], [1], progress=False)
    with pytest.raises(ValueError, match=r"unknown method.*medusa.*choose from naive, naive_nocache"):
        run_benchmark(pair, PROMPTS, [1], progress=False, methods=["naive", "medusa"])
    with pytest.raises(ValueError, match="list of names"):
        run_benchmark(pair, PROMPTS, [1], progress=False, methods="naive,prompt_lookup")


# ------------------------------------------------------------------------------- prompt lookup, self-draft
@pytest.fixture(scope="module")
def new_methods(pair) -> dict:
    """Prompt lookup, the fp16 self-draft, the dynamic draft length, a (random) draft head and HF's default
    assisted schedule next to the baseline (run even when not asked for)."""
    head = DraftHead.for_expert(pair.expert, torch.arange(VOCAB)).eval()
    return run_benchmark(pair, PROMPTS, GAMMAS, repeats=1, max_new_tokens=N, temperature=0.0, seed=0,
                         progress=False, methods=["prompt-lookup", "self_draft", "speculative-dynamic", "head",
                                                  "hf-assisted-default"],
                         confidence_threshold=0.5, head=head)


def test_chosen_methods_only_and_naive_always(new_methods):
    names = [row["name"] for row in new_methods["configurations"]]
    assert names == ["naive", "hf_assisted_default", "speculative_dynamic_g1", "self_draft_g1", "prompt_lookup_g1",
                     "head_g1", "speculative_dynamic_g3", "self_draft_g3", "prompt_lookup_g3", "head_g3"]
    assert new_methods["settings"]["methods"] == ["naive", "speculative_dynamic", "self_draft", "prompt_lookup",
                                                  "head", "hf_assisted_default"]
    assert new_methods["settings"]["confidence_threshold"] == 0.5
    assert new_methods["ratios"]["ours_naive_over_hf_greedy"] is None
    assert new_methods["ratios"]["ours_speculative_over_hf_assisted"] == {}


def test_new_methods_report_the_same_greedy_text_and_their_statistics(new_methods):
    for row in new_methods["configurations"]:
        assert row["new_tokens"] == [N] and row["same_text_as_naive"] == 1.0, row["name"]
        assert 0 < row["speedup_vs_naive"] < math.inf and row["per_token_s"]["median"] > 0
        if row["method"] == "naive":
            continue
        assert row["label"] == bench_configs.LABELS[row["method"]]
        assert row["c"] == new_methods["cost"]["c_by_drafter"][bench_configs.DRAFTER[row["method"]]]
        if row["method"] == "hf_assisted_default":
            assert row["gamma"] is None and "alpha" not in row  # transformers does not tell
            continue
        assert 0 <= row["alpha"] <= 1 and 0 <= row["share_kept"] <= 1
        assert 1 <= row["tokens_per_expert_call"] <= row["gamma"] + 1
        assert row["r"] == new_methods["cost"]["r"][row["gamma"]] and 0 < row["explained_from_counts"] < math.inf
        assert ("predicted_speedup" in row) == (row["method"] in bench_configs.CONSTANT_GAMMA)
    self_draft = rows(new_methods)["self_draft_g3"]
    assert self_draft["alpha"] > 0.9  # an fp16 copy of the expert agrees with it almost always


def test_every_drafter_has_its_cost(new_methods):
    cost = new_methods["cost"]
    assert set(cost["c_by_drafter"]) == {"amateur", "self_draft", "head", "prompt_lookup"}
    assert all(0 < c < math.inf for c in cost["c_by_drafter"].values())
    assert list(cost["r_by_draft_length"]) == [0, 1, 2, 3] and cost["r_by_draft_length"][0] == 1.0


def test_methods_option():
    assert bench.parse_args([]).methods is None  # run_benchmark's default: the original five
    args = bench.parse_args(["--methods", "prompt-lookup,self-draft,hf_greedy"])
    assert args.methods == ["naive", "hf_greedy", "self_draft", "prompt_lookup"]


def test_unknown_methods_are_refused_on_the_command_line(capsys):
    with pytest.raises(SystemExit):
        bench.parse_args(["--methods", "naive,lookahead"])
    error = capsys.readouterr().err
    assert "unknown method(s) lookahead: choose from" in error and "prompt_lookup" in error


def test_help_lists_the_methods(capsys):
    with pytest.raises(SystemExit):
        bench.parse_args(["--help"])
    shown = capsys.readouterr().out
    assert all(method in shown for method in bench_configs.METHODS)


# ------------------------------------------------------------------------------------------ command line
def test_main_writes_json_and_prints_a_table(pair, tmp_path, monkeypatch, capsys):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("ab\n\ncd e\nfgh\n")
    out = tmp_path / "sub" / "bench.json"
    asked = []
    monkeypatch.setattr(bench, "load_pair", lambda name, amateur=None: asked.append((name, amateur)) or pair)
    argv = ["--quick", "--prompts", str(prompts), "--out", str(out), "--max-new-tokens", "5", "--no-progress",
            "--amateur", "early-exit"]
    bench.main(argv)
    assert asked == [("pocket", "early-exit")]  # the recorded command can choose the amateur
    data = json.loads(out.read_text())  # strict JSON: NaN would have been written as null
    assert data["command"].startswith("python -m helpers.bench --quick")
    assert data["settings"]["prompts"] == ["ab", "cd e"]  # --quick: the first 2 prompts
    assert data["settings"]["gammas"] == [1, 4] and data["settings"]["repeats"] == 1
    assert data["settings"]["max_new_tokens"] == 5  # an explicit option beats --quick
    assert set(data["cost"]["r"]) == {"1", "4"}
    assert all(row["new_tokens"] == [5] for row in data["configurations"])
    printed = capsys.readouterr().out
    assert "| configuration |" in printed and str(out) in printed


def test_parse_args_defaults():
    args = bench.parse_args([])
    assert args.gammas == list(range(1, 11)) and args.repeats == 3 and args.max_new_tokens == 48
    assert args.temperature == 0 and args.pair == "pocket"
    assert args.prompts == [bench.DEFAULT_PROMPTS] and args.prompts[0].is_file()
    quick = bench.parse_args(["--quick", "--gammas", "2,3"])
    assert quick.gammas == [2, 3] and quick.repeats == 1 and quick.max_new_tokens == 24
    with pytest.raises(SystemExit):
        bench.parse_args(["--gammas", "1,x"])


def test_grounded_tasks_are_encoded_as_chat_turns(pair, tmp_path, monkeypatch):
    encoded = []

    def encode_chat(text):
        encoded.append(text)
        return pair.encode(text)

    monkeypatch.setattr(bench, "load_pair", lambda name, amateur=None: pair)
    monkeypatch.setattr(bench, "grounded_tasks", lambda: {"copy": "ab ab ab", "edit": "cd cd", "quote": "efg"})
    monkeypatch.setattr(pair, "encode_chat", encode_chat)
    out = tmp_path / "bench.json"
    bench.main(["--grounded", "--n-prompts", "2", "--methods", "prompt-lookup", "--gammas", "2", "--repeats", "1",
                "--max-new-tokens", "4", "--out", str(out), "--no-progress"])
    data = json.loads(out.read_text())
    assert encoded == ["ab ab ab", "cd cd"]
    assert {c["method"] for c in data["configurations"]} == {"naive", "prompt_lookup"}


def test_prompt_files_are_read_in_order_and_too_many_prompts_are_refused(tmp_path):
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text("one\ntwo\n")
    second.write_text("three\n")
    args = bench.parse_args(["--prompts", str(first), str(second)])
    assert args.prompts == [first, second]
    with pytest.raises(SystemExit, match=r"there are 3 prompts, use 1\.\.3"):
        bench.main(["--prompts", str(first), str(second), "--n-prompts", "4"])
