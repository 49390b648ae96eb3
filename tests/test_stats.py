"""helpers.stats: the goodness-of-fit test passes exact samplers, catches biased ones, and knows its chi-square."""

from __future__ import annotations

import math

import pytest
import torch

from helpers.stats import chi2_sf, exact_first_two, first_two_counts, goodness_of_fit, total_variation


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
    from helpers.decoding import naive

    expert, _ = tiny_pair
    exact = exact_first_two(expert, prompt, temperature=0.8)
    assert exact.sum() == pytest.approx(1.0) and exact.shape == (144,)
    counts = first_two_counts(lambda g: naive(expert, prompt, max_new_tokens=2, temperature=0.8,
                                               generator=g).new_token_ids, 12, 3000)
    assert goodness_of_fit(counts, exact).p_value > 1e-3
