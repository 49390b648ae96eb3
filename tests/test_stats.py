"""helpers.stats: the goodness-of-fit test passes exact samplers, catches biased ones, and knows its chi-square."""

from __future__ import annotations

import math

import pytest
import torch

from helpers.decoding import core, naive
from helpers.stats import (
    chi2_sf,
    exact_distribution,
    exact_first_two,
    exact_sequences,
    first_two_counts,
    goodness_of_fit,
    round_error,
    total_variation,
)


def test_chi2_survival_function_known_values():
    assert chi2_sf(3.841, 1) == pytest.approx(0.05, abs=1e-3)
    assert chi2_sf(18.307, 10) == pytest.approx(0.05, abs=1e-3)
    assert chi2_sf(0.0, 4) == pytest.approx(1.0)


def test_exact_samples_fit_and_biased_samples_do_not():
    probs = torch.tensor([0.5, 0.2, 0.2, 0.1], dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    exact = torch.bincount(torch.multinomial(probs, 20_000, replacement=True, generator=g), minlength=4)
    fit = goodness_of_fit(exact, probs)
    assert fit.p_value > 1e-3 and fit.tv <= fit.tv_noise and fit.n == 20_000 and fit.dof == 3
    biased = torch.tensor([0.45, 0.25, 0.2, 0.1], dtype=torch.float64)
    drawn = torch.bincount(torch.multinomial(biased, 20_000, replacement=True, generator=g), minlength=4)
    fit = goodness_of_fit(drawn, probs)
    assert fit.p_value < 1e-6 and fit.tv > fit.tv_noise


def test_impossible_outcomes_fail_outright():
    fit = goodness_of_fit(torch.tensor([50.0, 49.0, 1.0]), torch.tensor([0.5, 0.5, 0.0]))
    assert fit.impossible == 1 and fit.p_value == 0.0


def test_rare_outcomes_are_pooled():
    probs = torch.tensor([0.9, 0.0999, 0.0001])
    fit = goodness_of_fit(torch.tensor([900.0, 100.0, 0.0]), probs)
    assert fit.dof == 2  # two cells expected >= 5 times + one bin for the rare outcome, minus 1
    assert not math.isnan(fit.chi2)


def test_shapes_must_match():
    with pytest.raises(ValueError, match="same number of outcomes"):
        goodness_of_fit(torch.ones(3), torch.ones(4) / 4)


def test_total_variation():
    assert total_variation(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])) == 1.0
    assert total_variation(torch.tensor([0.5, 0.5]), torch.tensor([0.5, 0.5])) == 0.0


def test_exact_first_two_is_a_distribution_and_matches_naive_sampling(tiny_pair, prompt, one_thread):
    expert, _ = tiny_pair
    exact = exact_first_two(expert, prompt, temperature=0.8)
    assert exact.sum() == pytest.approx(1.0) and exact.shape == (144,)
    counts = first_two_counts(lambda g: naive(expert, prompt, max_new_tokens=2, temperature=0.8,
                                               generator=g).new_token_ids, 12, 3000)
    assert goodness_of_fit(counts, exact).p_value > 1e-3


def as_tensor(outcomes, vocab, length):
    table = torch.zeros((vocab,) * length, dtype=torch.float64)
    for y, p in outcomes.items():
        table[y] = p
    return table


@pytest.mark.parametrize("warp", [{"temperature": 0.8}, {"temperature": 1.0, "top_k": 4}, {"temperature": 0}],
                         ids=["T0.8", "T1-top_k4", "greedy"])
def test_exact_distribution_of_naive_sampling_is_the_model_distribution(tiny_pair, prompt, one_thread, warp):
    """The enumeration of every path through the draws of the real sampler gives exact_sequences, to float rounding."""
    expert, _ = tiny_pair
    runs = []

    def run():
        runs.append(1)
        return tuple(naive(expert, prompt, max_new_tokens=2, **warp).new_token_ids)

    outcomes = exact_distribution(run)
    exact = exact_sequences(expert, prompt, 2, **warp)
    assert len(runs) == len(outcomes) == torch.count_nonzero(exact)  # one run per path: greedy has a single one
    assert sum(outcomes.values()) == pytest.approx(1.0, abs=1e-12)
    assert float((as_tensor(outcomes, 12, 2) - exact).abs().max()) < 1e-6
    assert exact_first_two(expert, prompt, **warp).tolist() == exact.flatten().tolist()


def test_only_the_first_draws_branch(tiny_pair, prompt, one_thread):
    """branching_draws=2: the third token's draw takes its most probable outcome, so the first two tokens of 3 come
    out in 12 * 12 runs, not 12^3."""
    expert, _ = tiny_pair
    runs = []

    def run():
        runs.append(1)
        return tuple(naive(expert, prompt, max_new_tokens=3).new_token_ids[:2])

    outcomes = exact_distribution(run, branching_draws=2)
    assert len(runs) == len(outcomes) == 144
    assert float((as_tensor(outcomes, 12, 2) - exact_sequences(expert, prompt, 2)).abs().max()) < 1e-6


def test_exact_distribution_puts_the_real_draws_back(tiny_pair, prompt):
    expert, _ = tiny_pair
    real = core.sample, core.bernoulli

    def failing_run():
        naive(expert, prompt, max_new_tokens=1)
        raise RuntimeError("the decoder failed")

    with pytest.raises(RuntimeError, match="the decoder failed"):
        exact_distribution(failing_run)
    assert (core.sample, core.bernoulli) == real


def test_exact_distribution_of_acceptance_draws():
    """bernoulli(a) branches into True (a) and False (1 - a); a certain outcome does not branch."""
    outcomes = exact_distribution(lambda: (core.bernoulli(0.3), core.bernoulli(1.0), core.bernoulli(0.0)))
    assert outcomes == {(True, True, False): pytest.approx(0.3), (False, True, False): pytest.approx(0.7)}


def test_round_error_is_zero_for_the_model_itself_and_not_for_another(tiny_pair, prompt, one_thread):
    """A "round" that emits one token of the expert, or two, or stops at random in between, continued by the expert,
    is the expert; one token of the amateur is not."""
    expert, amateur = tiny_pair
    one = {(x,): p for x, p in enumerate(exact_sequences(expert, prompt, 1).tolist()) if p > 0}
    two = exact_sequences(expert, prompt, 2)
    mixed = {**{y: 0.5 * p for y, p in one.items()},
             **{(a, b): 0.5 * float(two[a, b]) for a, b in torch.nonzero(two).tolist()}}
    for outputs in (one, mixed, {(): 1.0}):
        assert sum(outputs.values()) == pytest.approx(1.0)
        assert round_error(outputs, expert, prompt, 2) < 1e-9
    wrong = {(x,): p for x, p in enumerate(exact_sequences(amateur, prompt, 1).tolist()) if p > 0}
    assert round_error(wrong, expert, prompt, 2) == pytest.approx(total_variation(
        exact_sequences(amateur, prompt, 1), exact_sequences(expert, prompt, 1)))
    with pytest.raises(ValueError, match="pass length >= γ"):
        round_error(mixed, expert, prompt, 1)
