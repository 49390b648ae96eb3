"""helpers.protocol: the one speed protocol (warm-up, shuffled interleaving, raw records, paired intervals only from
enough prompts, several runs pooled)."""

from __future__ import annotations

import argparse
import json

import pytest
import torch

from helpers import protocol
from helpers.decoding import Generation, SpecIteration, Stats


def generation(rounds: list[tuple[int, int]]) -> Generation:
    """A generation whose rounds drafted n tokens and kept k of them, for each (n, k)."""
    trace = [SpecIteration(list(range(n)), [0.5] * n, [0.5] * n, k, 0, "resampled") for n, k in rounds]
    return Generation([0] * sum(k + 1 for _, k in rounds), Stats(expert_calls=len(rounds)), trace)


def test_round_counts_and_acceptance_by_depth_count_only_judged_tokens():
    """Depth 1 is judged in every round that drafted; depth k only after k - 1 acceptances."""
    runs = [generation([(3, 0), (3, 3), (3, 1)]), generation([(2, 2), (0, 0)])]
    counts = [c for run in runs for c in protocol.round_counts(run)]
    assert counts == [[3, 0], [3, 3], [3, 1], [2, 2], [0, 0]]
    assert protocol.depth_acceptance(counts) == [3 / 4, 2 / 3, 1.0]
    assert protocol.round_counts(Generation([1, 2])) == []


def test_timed_runs_warm_up_each_configuration_and_shuffle_the_order_every_round():
    calls = []

    def config(name):
        def run(ids, seed):
            calls.append((name, seed))
            return Generation([1, 2], Stats(expert_calls=1))
        return run

    configs = {name: config(name) for name in "abcd"}
    records = protocol.timed_runs(configs, [torch.tensor([[1]])] * 3, rounds=4, progress=False)
    assert [name for name, _ in calls[:4]] == list("abcd"), "one warm-up run of every configuration first"
    assert len(records) == 3 * 4 * 4
    keys = {(r["prompt"], r["round"]) for r in records}
    orders = {tuple(r["config"] for r in records if (r["prompt"], r["round"]) == key) for key in keys}
    assert len(orders) > 1, "the order changes between rounds"
    assert all(sorted(order) == list("abcd") for order in orders)
    assert all(len({r["seed"] for r in records if (r["prompt"], r["round"]) == key}) == 1 for key in keys), \
        "every configuration of a round gets the same seed"
    assert {"seconds", "tokens", "expert_calls", "others_busy_cores", "position", "rounds", "alpha",
            "round_seconds"} <= set(records[0])


@pytest.mark.parametrize("bad", [{"rounds": 0}, {"prompts": []}, {"configs": {}}])
def test_timed_runs_refuse_an_empty_protocol(bad):
    args = {"configs": {"a": lambda ids, seed: Generation([1])}, "prompts": [torch.tensor([[1]])], "rounds": 1} | bad
    with pytest.raises(ValueError, match="need rounds >= 1"):
        protocol.timed_runs(args.pop("configs"), args.pop("prompts"), progress=False, **args)


def records(n_prompts: int, fast_seconds: float, rounds: int = 3) -> list[dict]:
    """'slow' takes 2 s per 10 tokens, 'fast' the given seconds per 5 tokens (its text is shorter at T = 1)."""
    return [rec for i in range(n_prompts) for r in range(rounds)
            for rec in ({"prompt": i, "round": r, "config": "slow", "seconds": 2.0 + r, "tokens": [0] * 10},
                        {"prompt": i, "round": r, "config": "fast", "seconds": fast_seconds, "tokens": [0] * 5})]


def test_speedup_is_per_token_paired_by_prompt_and_refuses_too_few_prompts():
    s = protocol.speedup(records(20, 0.5), "slow", "fast")
    assert s.n == 20 and s.mean == pytest.approx((3.0 / 10) / (0.5 / 5)), "median over rounds, per token"
    with pytest.raises(ValueError, match="at least 20"):
        protocol.speedup(records(19, 0.5), "slow", "fast")


def test_across_runs_reports_every_run_the_pooled_speedup_and_the_spread():
    out = protocol.across_runs([records(20, 0.5), records(20, 1.0)], "slow", "fast")
    assert [s.mean for s in out["per_run"]] == pytest.approx([3.0, 1.5])
    assert out["pooled"].mean == pytest.approx(2.25) and out["pooled"].n == 20
    assert out["spread"] == pytest.approx(1.5)


def fake_evaluation(result):
    def run(ids, seed):
        return Generation([1, 2], Stats(expert_calls=1))
    return {"a": run, "b": run}, [torch.tensor([[1]])] * 2


def test_a_run_is_appended_with_its_machine_and_command_only_on_the_files_cpu_kind(tmp_path, monkeypatch):
    out = tmp_path / "result.json"
    out.write_text(json.dumps({"settings": {"rounds": 2}, "machine": {"cpu_kind": "Some CPU (AVX2)"}, "runs": []}))
    monkeypatch.setattr(protocol, "machine_info", lambda device: {"cpu_kind": "Some CPU (AVX2)"})
    protocol.append_run(out, 0, fake_evaluation, seed=1, command="python -m x --add-run")
    run = json.loads(out.read_text())["runs"][0]
    assert run["command"] == "python -m x --add-run" and run["machine"]["cpu_kind"] == "Some CPU (AVX2)"
    assert len(run["records"]) == 2 * 2 * 2
    monkeypatch.setattr(protocol, "machine_info", lambda device: {"cpu_kind": "Other CPU (AVX512)"})
    with pytest.raises(ValueError, match=r"measured on Some CPU \(AVX2\), this machine is Other CPU"):
        protocol.append_run(out, 1, lambda result: pytest.fail("refuse before loading the models"), seed=2)


def test_the_shared_options_show_a_file_add_a_run_or_start_a_new_measurement(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    protocol.add_file_arguments(parser, "a smoke test")
    out = tmp_path / "result.json"
    out.write_text(json.dumps({"runs": [{"run": 0}]}))
    added = []

    def evaluate_run(path, run, command):
        added.append((run, command))

    def show(result):
        return f"{len(result['runs'])} run(s)"

    assert protocol.file_command(parser.parse_args(["--out", str(out), "--show"]), "m", evaluate_run, show)
    assert protocol.file_command(parser.parse_args(["--out", str(out), "--add-run"]), "m", evaluate_run, show)
    assert protocol.file_command(parser.parse_args(["--out", str(out), "--evaluate-run", "3"]), "m", evaluate_run, show)
    assert added == [(1, f"python -m m --out {out} --add-run"), (3, None)]
    assert capsys.readouterr().out == "1 run(s)\n1 run(s)\n"
    assert not protocol.file_command(parser.parse_args(["--out", str(out)]), "m", evaluate_run, show)


def test_a_files_commands_list_every_added_run():
    result = {"command": "python -m helpers.speed --out x.json", "runs": [{"run": 0}, {"run": 1, "command": "add"}]}
    assert protocol.commands(result) == "`python -m helpers.speed --out x.json` then `add`"
