"""helpers.compare: paired bootstrap intervals of method differences over prompts."""

from __future__ import annotations

import pytest

from helpers.compare import (
    Interval,
    corpus_distinct,
    corpus_verdict,
    ends_early,
    holm,
    holm_verdicts,
    mean_interval,
    mean_of,
    median_interval,
    paired_difference,
    per_prompt,
    sign_flip_p_value,
    sign_test,
    verdict,
)
from helpers.metrics import diversity


def row(prompt, method, text, n_tokens=8, **metrics):
    return {"prompt": prompt, "method": method, "text": text, "n_tokens": n_tokens, **metrics}


LOOP = "a b a b a b a b"
FRESH = "one two three four five six seven eight"


def test_a_real_difference_excludes_zero_and_noise_does_not():
    rows = [row(f"p{i}", "loops", LOOP, diversity=0.1 + 0.01 * i) for i in range(20)]
    rows += [row(f"p{i}", "fresh", FRESH, diversity=0.9 + 0.01 * (i % 3)) for i in range(20)]
    diff = paired_difference(rows, "fresh", "loops", "diversity")
    assert diff.excludes_zero and diff.low > 0.5 and diff.n == 20
    noisy = [row(f"p{i}", m, FRESH, diversity=0.5 + (0.1 if (i + (m == "b")) % 2 else -0.1))
             for i in range(20) for m in ("a", "b")]
    assert not paired_difference(noisy, "a", "b", "diversity").excludes_zero


def test_samples_are_averaged_per_prompt_before_pairing():
    rows = [row("p", "s", FRESH, diversity=0.2), row("p", "s", FRESH, diversity=0.4)]
    assert per_prompt(rows, "s", "diversity") == {"p": pytest.approx(0.3)}


def test_fixed_length_cuts_both_texts_to_the_shorter():
    long_loop = " ".join([LOOP] * 3)  # 24 words, repeats a lot
    rows = [row(p, "early", "a b c d", n_tokens=4) for p in ("p1", "p2")]
    rows += [row(p, "long", long_loop, n_tokens=32) for p in ("p1", "p2")]
    fixed = paired_difference(rows, "early", "long", "diversity", fixed_length=True)
    assert fixed.mean == pytest.approx(diversity("a b c d") - diversity("a b a b"))  # 4 words each
    assert ends_early(rows, "early", 32) == 2 and ends_early(rows, "long", 32) == 0


def test_mean_nll_at_equal_length_cuts_tokens_not_words():
    # one method is surer of its first tokens and stops early; the other's text is longer and ends unsure
    rows = [row(p, "short", "a b", n_tokens=2, nll=[1.0, 1.0]) for p in ("p1", "p2")]
    rows += [row(p, "long", "a b c d e", n_tokens=5, nll=[2.0, 2.0, 9.0, 9.0, 9.0]) for p in ("p1", "p2")]
    fixed = paired_difference(rows, "short", "long", "mean NLL", fixed_length=True)
    assert fixed.mean == pytest.approx(1.0 - 2.0) and fixed.n == 2  # the first 2 tokens of each
    rows = [{**r, "mean NLL": sum(r["nll"]) / len(r["nll"])} for r in rows]
    assert paired_difference(rows, "short", "long", "mean NLL").mean == pytest.approx(1.0 - 31 / 5)  # own lengths
    with pytest.raises(ValueError, match="--rescore"):
        paired_difference([{k: v for k, v in r.items() if k != "nll"} for r in rows], "short", "long", "mean NLL",
                          fixed_length=True)


def test_corpus_distinct_sees_a_phrase_reused_across_prompts():
    # "same" writes one template for every prompt: each text alone repeats nothing, the corpus repeats everything
    rows = [row(f"p{i}", "same", "the answer is simple and clear today") for i in range(12)]
    rows += [row(f"p{i}", "fresh", f"w{i} x{i} y{i} z{i} v{i} u{i} t{i} extra words") for i in range(12)]
    same, fresh, p_value, n = corpus_distinct(rows, "same", "fresh", 2, n_perm=500)
    assert (same, fresh, n) == (pytest.approx(6 / 72), 1.0, 12)  # both cut to 7 words: 6 bigrams per prompt
    assert p_value < 0.01 and corpus_verdict(p_value) == "real" and corpus_verdict(0.05) == "inside the noise"
    equal = corpus_distinct(rows, "fresh", "fresh", 2, n_perm=200)
    assert equal[0] == equal[1] and equal[2] == 1.0
    with pytest.raises(ValueError, match="at least 2 prompts"):
        corpus_distinct(rows[:1] + rows[12:13], "same", "fresh", 2)


def test_bad_requests_say_what_to_do():
    rows = [row("p1", "a", FRESH, perplexity=3.0), row("p2", "a", FRESH, perplexity=4.0)]
    with pytest.raises(ValueError, match="methods: \\['a'\\]"):
        paired_difference(rows, "a", "b", "perplexity")
    with pytest.raises(ValueError, match="compare 'mean NLL' with fixed_length=True"):
        paired_difference([*rows, row("p1", "b", FRESH), row("p2", "b", FRESH)], "a", "b", "perplexity",
                          fixed_length=True)
    with pytest.raises(ValueError, match="at least 2 prompts"):
        mean_interval(rows[:1], "a", "perplexity")
    interval = mean_interval(rows, "a", "perplexity")
    assert 3.0 <= interval.low <= interval.mean == 3.5 <= interval.high <= 4.0


def test_median_interval_resamples_whole_prompts():
    tight = [[1.5, 1.5, 1.6], [1.4, 1.5, 1.5], [1.6, 1.5, 1.5]]
    low, high = median_interval(tight, n_boot=2000)
    assert 1.4 <= low <= 1.5 <= high <= 1.6
    wide = [[0.5, 0.5], [2.0, 2.0], [1.0, 1.0]]
    low, high = median_interval(wide, n_boot=2000)
    assert low <= 0.5 + 1e-9 and high >= 2.0 - 1e-9
    with pytest.raises(ValueError, match="at least 2"):
        median_interval([[1.0]])


def test_mean_of_per_prompt_values():
    interval = mean_of([0.1, 0.2, 0.15, 0.25, 0.3])
    assert interval.mean == pytest.approx(0.2) and 0.1 <= interval.low < 0.2 < interval.high <= 0.3
    assert interval.excludes_zero and interval.n == 5
    assert not mean_of([-0.2, 0.1, 0.3, -0.1]).excludes_zero
    with pytest.raises(ValueError, match="at least 2 prompts"):
        mean_of([0.5])


def test_sign_test_counts_wins_and_their_exact_tail():
    assert sign_test([0.1] * 6) == (6, 6, 1 / 64)  # all six positive: p = 0.5^6
    assert sign_test([0.2, -0.1, 0.0, 0.3]) == (2, 3, 0.5)  # ties are dropped; P(>= 2 of 3) = 4/8
    assert sign_test([-0.1, -0.2])[2] == 1.0
    with pytest.raises(ValueError, match="every difference is zero"):
        sign_test([0.0, 0.0])


def test_the_sign_flip_test_separates_a_shift_from_noise():
    shifted = [0.1 + 0.01 * i for i in range(20)]
    assert sign_flip_p_value(shifted) == pytest.approx(1 / 20_001, rel=0.5)  # every random flip is smaller
    symmetric = [0.3, -0.3, 0.1, -0.1, 0.2, -0.2]
    assert sign_flip_p_value(symmetric) == 1.0  # mean 0: every flip is at least as extreme
    four = [0.5, 0.5, 0.5, 0.5]  # of the 16 sign patterns, 2 reach |mean| 0.5: p = 1/8, up to Monte Carlo noise
    assert sign_flip_p_value(four) == pytest.approx(1 / 8, abs=0.01)
    with pytest.raises(ValueError, match="at least 2"):
        sign_flip_p_value([0.5])


def test_paired_differences_carry_their_p_value():
    rows = [row(f"p{i}", "loops", LOOP, diversity=0.1 + 0.01 * i) for i in range(20)]
    rows += [row(f"p{i}", "fresh", FRESH, diversity=0.9) for i in range(20)]
    diff = paired_difference(rows, "fresh", "loops", "diversity")
    assert diff.p_value is not None and diff.p_value < 0.001 and str(diff).count("[") == 1
    assert mean_of([-0.2, 0.1, 0.3, -0.1]).p_value is None  # a plain mean (of α, say) is not tested against 0


def test_holm_multiplies_the_smallest_by_m_and_keeps_the_order():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])  # 3 × 0.01; 2 × 0.03; max(0.06, 1 × 0.04)
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1, never decreasing
    assert holm([0.002]) == [0.002]
    with pytest.raises(ValueError, match="at least one"):
        holm([])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        holm([1.5])


def test_real_needs_both_the_adjusted_p_and_the_interval():
    shifted, noisy = mean_of([0.1, 0.2, 0.15, 0.25, 0.3]), mean_of([-0.2, 0.1, 0.3, -0.1])
    assert verdict(shifted, 0.01) == "real"
    assert verdict(shifted, 0.2) == "not confirmed"  # the interval alone
    assert verdict(noisy, 0.01) == "not confirmed"  # the adjusted p alone
    assert verdict(noisy, 0.9) == "inside the noise"


def test_holm_verdicts_adjust_one_family_together():
    family = {"a": Interval(0.2, 0.1, 0.3, 20, p_value=0.01), "b": Interval(0.1, 0.01, 0.2, 20, p_value=0.04),
              "c": Interval(0.0, -0.1, 0.1, 20, p_value=0.9)}
    adjusted, said = holm_verdicts(family)
    assert adjusted == pytest.approx({"a": 0.03, "b": 0.08, "c": 0.9})  # 3 × 0.01, 2 × 0.04, 1 × 0.9
    assert said == {"a": "real", "b": "not confirmed", "c": "inside the noise"}
    with pytest.raises(ValueError, match="paired_difference"):
        holm_verdicts({"d": Interval(0.1, 0.0, 0.2, 5)})
