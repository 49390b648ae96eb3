"""helpers.precision: greedy speculative = greedy in fp32 (as in exact arithmetic); in half precision, up to a
near-tie."""

from __future__ import annotations

import pytest
import torch

from helpers.data import ARTICLE_PROMPTS, read_prompts
from helpers.decoding import naive, speculative
from helpers.models import load_pair
from helpers.precision import compare_greedy_texts, exact_arithmetic, ulp


def test_ulp_is_one_rounding_step():
    assert ulp(1.0, torch.float32) == torch.finfo(torch.float32).eps
    assert ulp(28.25, torch.bfloat16) == 0.125  # 2^4 · 2^-7
    assert ulp(-3.0, torch.float16) == 2 * torch.finfo(torch.float16).eps


def test_identical_outputs(tiny_pair, prompt):
    expert, _ = tiny_pair
    assert exact_arithmetic(expert)
    agreement = compare_greedy_texts(expert, prompt, [3, 4, 5], [3, 4, 5])
    assert agreement.identical and agreement.explained_by_rounding and agreement.describe() == "identical"


def test_a_clear_difference_is_not_blamed_on_rounding(tiny_pair, prompt):
    expert, _ = tiny_pair
    greedy = naive(expert, prompt, max_new_tokens=3, temperature=0).new_token_ids
    with torch.no_grad():
        worst = int(expert(prompt).logits[0, -1].argmin())
    agreement = compare_greedy_texts(expert, prompt, greedy, [worst, *greedy[1:]])
    assert agreement.first_difference == 0 and agreement.logit_gap > 1
    assert not agreement.explained_by_rounding


@pytest.mark.pocket
def test_half_precision_speculative_matches_greedy_up_to_a_near_tie():
    """bf16 on the CPU, as load_pair picks on a GPU: every difference must sit at a near-tie (notebook 03)."""
    pair = load_pair("pocket", dtype=torch.bfloat16)
    assert not exact_arithmetic(pair.expert)
    for text in read_prompts(ARTICLE_PROMPTS, 3):  # 3 of the 5: bf16 is slow where the CPU emulates it
        ids = pair.encode(text)
        greedy = naive(pair.expert, ids, max_new_tokens=40, temperature=0).new_token_ids
        spec = speculative(pair.expert, pair.amateur, ids, max_new_tokens=40, gamma=4, temperature=0).new_token_ids
        agreement = compare_greedy_texts(pair.expert, ids, greedy, spec)
        assert agreement.explained_by_rounding, f"{text!r}: {agreement.describe()}"
