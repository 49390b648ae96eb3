"""helpers.timing: the prediction formulas, the interleaving order, and forward-pass timing on tiny models.
No assertion depends on how fast the machine is."""

from __future__ import annotations

import math
import os

import pytest
import torch
from conftest import tiny_llama

from helpers.timing import (
    ForwardStep,
    Summary,
    best_gamma,
    cost_ratios,
    drafter_costs,
    expected_tokens,
    forward_costs,
    interleaved,
    load_warning,
    median,
    others_busy_cores,
    paired_ratios,
    predicted_speedup,
    speedup_from_counts,
    step_time,
    summarize,
)


# ---------------------------------------------------------------------------------------- predictions
@pytest.mark.parametrize("gamma", [1, 4, 7])
def test_expected_tokens_at_the_ends(gamma):
    assert expected_tokens(0.0, gamma) == 1.0  # every draft rejected: only the expert's token
    assert expected_tokens(1.0, gamma) == gamma + 1  # every draft accepted + the bonus token
    assert expected_tokens(1 - 1e-9, gamma) == pytest.approx(gamma + 1, rel=1e-6)  # continuous at α = 1


@pytest.mark.parametrize(("alpha", "gamma", "expected"), [
    (0.5, 1, 1.5),
    (0.5, 2, 1.75),
    (0.8, 3, 2.952),
    (0.75, 7, (1 - 0.75 ** 8) / 0.25),  # Leviathan et al. Table 2, T5 greedy: ≈ 3.6 tokens per iteration
])
def test_expected_tokens_values(alpha, gamma, expected):
    assert expected_tokens(alpha, gamma) == pytest.approx(expected)
    assert expected_tokens(alpha, gamma) == pytest.approx(sum(alpha ** i for i in range(gamma + 1)))


@pytest.mark.parametrize("alpha", [-0.1, 1.1, math.nan])
def test_expected_tokens_refuses_alpha_outside_0_1(alpha):
    with pytest.raises(ValueError, match="alpha"):
        expected_tokens(alpha, 3)


def test_predicted_speedup():
    assert predicted_speedup(0.5, 2, c=0.1, r=1.2) == pytest.approx(1.75 / 1.4)
    # r = 1 is Leviathan et al. Thm 3.8: (1 - α^(γ+1)) / ((1 - α)(γc + 1))
    assert predicted_speedup(0.75, 7, c=0.05) == pytest.approx((1 - 0.75 ** 8) / (0.25 * (7 * 0.05 + 1)))
    assert predicted_speedup(0.6, 3, c=0.0, r=1.0) == pytest.approx(expected_tokens(0.6, 3))
    # an amateur as slow as the expert never pays off, even with every draft accepted
    assert predicted_speedup(1.0, 4, c=1.0, r=1.0) == pytest.approx(1.0)
    assert predicted_speedup(0.9, 4, c=1.0, r=1.5) < 1
    with pytest.raises(ValueError):
        predicted_speedup(0.5, 0, c=0.1, r=0.0)


# ------------------------------------------------------------------------------------- interleaving
def test_interleaved_shuffles_every_round_and_drops_warmup():
    calls: list[str] = []
    after: list[str] = []
    fns = {name: (lambda name=name: calls.append(name)) for name in ("a", "b", "c")}
    times = interleaved(fns, repeats=3, warmup=2, on_run=after.append)
    rounds = [calls[i:i + 3] for i in range(0, len(calls), 3)]
    assert len(rounds) == 5 and all(sorted(r) == ["a", "b", "c"] for r in rounds)  # each function once per round
    assert len({tuple(r) for r in rounds}) > 1, "the order changes between rounds"
    assert after == calls
    assert set(times) == {"a", "b", "c"}
    assert all(len(t) == 3 and all(s >= 0 for s in t) for t in times.values())


def test_interleaved_without_a_seed_keeps_round_robin():
    calls: list[str] = []
    interleaved({name: (lambda name=name: calls.append(name)) for name in "ab"}, repeats=2, warmup=0, seed=None)
    assert calls == ["a", "b", "a", "b"]


def test_interleaved_default_warmup_and_checks():
    calls: list[str] = []
    times = interleaved({"x": lambda: calls.append("x")}, repeats=2)
    assert calls == ["x"] * 3 and len(times["x"]) == 2
    with pytest.raises(ValueError):
        interleaved({"x": lambda: None}, repeats=0)


def test_median_and_summary():
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 3.0, 2.0]) == 2.5
    assert summarize([0.3, 0.1, 0.2]) == Summary(median=0.2, min=0.1, max=0.3, n=3)
    with pytest.raises(ValueError):
        median([])


# ------------------------------------------------------------------------------------- forward costs
@pytest.fixture(scope="module")
def model():
    return tiny_llama(3, layers=2)


@pytest.fixture
def ids() -> torch.Tensor:
    return torch.tensor([[1, 2, 3, 4]])


@pytest.mark.parametrize("n_tokens", [1, 3])
def test_step_time_is_a_positive_float(model, ids, one_thread, n_tokens):
    seconds = step_time(model, ids, n_tokens, repeats=3)
    assert isinstance(seconds, float)
    assert 0 < seconds < math.inf


@torch.no_grad()
def test_forward_step_leaves_the_cache_usable(model, ids, one_thread):
    step = ForwardStep(model, ids, n_tokens=3)
    for _ in range(4):
        step()
        assert step.cache.get_seq_length() == ids.shape[1]
    following = torch.tensor([[5, 6]])
    cached = model(following, past_key_values=step.cache, use_cache=True).logits[0]
    fresh = model(torch.cat([ids, following], dim=1)).logits[0, -2:]
    torch.testing.assert_close(cached, fresh, rtol=1e-4, atol=1e-5)


def test_cost_ratios(one_thread):
    expert, amateur = tiny_llama(0, layers=2), tiny_llama(1)
    c, r = cost_ratios(expert, amateur, torch.tensor([[1, 2, 3]]), gammas=[1, 4], repeats=3)
    assert 0 < c < math.inf
    assert list(r) == [1, 4]
    assert all(0 < v < math.inf for v in r.values())


def test_drafter_costs_time_every_drafter_and_every_draft_length(one_thread):
    expert, amateur, ids = tiny_llama(0, layers=2), tiny_llama(1), torch.tensor([[1, 2, 3]])
    c, r = drafter_costs(expert, ids, {"amateur": ForwardStep(amateur, ids, 1), "nothing": lambda: None},
                         range(1, 4), repeats=3)
    assert set(c) == {"amateur", "nothing"} and all(0 < v < math.inf for v in c.values())
    assert c["nothing"] < c["amateur"]
    assert list(r) == [0, 1, 2, 3] and r[0] == 1.0 and all(0 < v < math.inf for v in r.values())
    with pytest.raises(ValueError, match="'expert' names the baseline"):
        drafter_costs(expert, ids, {"expert": lambda: None}, [1], repeats=1)


def test_speedup_from_counts_is_the_cost_model_on_counted_rounds():
    r = {0: 1.0, 1: 1.2, 2: 1.5}
    # three rounds: nothing drafted (1 token), 2 drafted (3 tokens), 1 drafted (2 tokens): 6 tokens
    assert speedup_from_counts([0, 2, 1], 6, c=0.1, r=r) == pytest.approx(6 / (1.0 + 1.7 + 1.3))
    # a constant γ with every draft accepted gives predicted_speedup at α = 1
    assert speedup_from_counts([2] * 5, 15, c=0.1, r=r) == pytest.approx(predicted_speedup(1.0, 2, 0.1, 1.5))
    with pytest.raises(ValueError, match="missing the draft lengths \\[3\\]"):
        speedup_from_counts([3], 4, c=0.1, r=r)
    with pytest.raises(ValueError, match="no rounds"):
        speedup_from_counts([], 0, c=0.1, r=r)


def test_paired_ratios_compare_round_by_round():
    times = {"slow": [2.0, 9.0, 3.0], "fast": [1.0, 3.0, 2.0]}  # round 2 was slow for both (a busy moment)
    assert paired_ratios(times, "slow", "fast") == [1.5, 2.0, 3.0]


def test_best_gamma_uses_each_gammas_own_verification_cost():
    flat = {g: 1.5 for g in (1, 2, 4, 8)}
    assert best_gamma(0.9, 0.05, flat) == 8
    costly_long = {**flat, 8: 6.0}  # r(8) measured high: γ = 8 must lose, though r(4) is cheap
    assert best_gamma(0.9, 0.05, costly_long) == 4
    with pytest.raises(ValueError, match="measure r"):
        best_gamma(0.9, 0.05, {})


def test_load_warning_names_the_fix(monkeypatch):
    import helpers.timing

    monkeypatch.setattr(helpers.timing, "others_busy_cores", lambda window: 1.2)
    assert "OMP_NUM_THREADS=1" in load_warning()
    monkeypatch.setattr(helpers.timing, "others_busy_cores", lambda window: 0.1)
    assert load_warning() is None


def test_others_busy_cores_does_not_count_this_process():
    busy = others_busy_cores(0.2)
    assert busy is None or 0 <= busy <= (os.cpu_count() or 1) + 0.5


def test_forward_costs_are_relative_to_one_step(one_thread):
    model = tiny_llama(0)
    costs = forward_costs(model, torch.tensor([[1, 2, 3]]), [1, 2, 8], repeats=2)
    assert list(costs) == [1, 2, 8] and costs[1] == 1.0 and all(v > 0 for v in costs.values())
    with pytest.raises(ValueError, match=">= 1"):
        forward_costs(model, torch.tensor([[1, 2, 3]]), [0], repeats=1)
