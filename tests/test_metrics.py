"""helpers.metrics: every lexical metric against values computed by hand, perplexity against a token-by-token
loop on a tiny random model, and every refused input."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import VOCAB, tiny_llama

from helpers.metrics import (
    corpus_distinct_n,
    distinct_n,
    diversity,
    ngram_entropy,
    ngrams,
    perplexity,
    rep_n,
    summarize,
    text_metrics,
    token_nll,
    words,
)


# ------------------------------------------------------------------------------------------ lexical metrics
def test_words_and_ngrams():
    assert words("  a b\n\ta  b ") == ["a", "b", "a", "b"]
    assert ngrams(["a", "b", "a", "b"], 2) == [("a", "b"), ("b", "a"), ("a", "b")]
    assert ngrams(["a", "b"], 3) == []


def test_alternating_text():
    # unigrams a, b, a, b; bigrams (a b), (b a), (a b); trigrams (a b a), (b a b); one 4-gram
    m = text_metrics("a b a b")
    assert m["entropy-1"] == pytest.approx(1.0)  # p = (1/2, 1/2)
    assert m["entropy-2"] == pytest.approx(2 / 3 * math.log2(3 / 2) + 1 / 3 * math.log2(3))  # p = (2/3, 1/3)
    assert m["entropy-3"] == pytest.approx(1.0)
    assert m["distinct-1"] == pytest.approx(1 / 2)
    assert m["distinct-2"] == pytest.approx(2 / 3)
    assert m["rep-2"] == pytest.approx(1 / 3)
    assert m["rep-3"] == 0.0
    assert m["rep-4"] == 0.0
    assert m["diversity"] == pytest.approx(2 / 3)


def test_one_word_repeated():
    m = text_metrics("x x x x")
    assert m["entropy-1"] == m["entropy-2"] == m["entropy-3"] == 0.0
    assert m["distinct-1"] == pytest.approx(1 / 4)
    assert m["distinct-2"] == pytest.approx(1 / 3)
    assert m["rep-2"] == pytest.approx(2 / 3)
    assert m["rep-3"] == pytest.approx(1 / 2)
    assert m["rep-4"] == 0.0  # a single 4-gram cannot repeat
    assert m["diversity"] == pytest.approx(1 / 3 * 1 / 2 * 1)


def test_no_repetition():
    text = "the quick brown fox jumps"
    assert ngram_entropy(text, 1) == pytest.approx(math.log2(5))
    assert distinct_n(text, 1) == distinct_n(text, 2) == 1.0
    assert diversity(text) == 1.0


def test_empty_text():
    m = text_metrics("")
    assert all(m[key] == 0.0 for key in m if key != "diversity")
    assert m["diversity"] == 1.0  # no n-gram at all, hence no repeated one


def test_text_shorter_than_n():
    assert ngram_entropy("a b", 3) == 0.0
    assert distinct_n("a b", 3) == 0.0
    assert rep_n("a b", 3) == 0.0


def test_text_metrics_keys():
    assert list(text_metrics("a b c")) == ["entropy-1", "entropy-2", "entropy-3", "distinct-1", "distinct-2",
                                           "rep-2", "rep-3", "rep-4", "diversity"]


def test_corpus_distinct_n_counts_repeats_across_texts_but_not_across_their_boundary():
    assert corpus_distinct_n(["a b c", "a b d"], 2) == pytest.approx(3 / 4)  # "a b" twice, across two texts
    assert distinct_n("a b c", 2) == distinct_n("a b d", 2) == 1.0  # each text alone repeats nothing
    assert corpus_distinct_n(["a b", "c d"], 2) == 1.0  # "b c" would cross the boundary: not an n-gram
    assert corpus_distinct_n(["a", ""], 2) == 0.0


# ------------------------------------------------------------------------------------------ summarize
def test_summarize_two_rows():
    summary = summarize([{"a": 1.0, "b": 2.0}, {"a": 3.0, "b": 2.0}])
    assert summary["a"] == pytest.approx((2.0, math.sqrt(2)))  # sample std: sqrt((1 + 1) / (2 - 1))
    assert summary["b"] == pytest.approx((2.0, 0.0))


def test_summarize_one_row():
    assert summarize([{"a": 5.0}]) == {"a": (5.0, 0.0)}


# ------------------------------------------------------------------------------------------ perplexity
@torch.no_grad()
def perplexity_by_hand(model, prompt: torch.Tensor, continuation: list[int]) -> float:
    """Recompute the whole prefix for every continuation token; sum log p(token | prefix)."""
    total = 0.0
    for i, token in enumerate(continuation):
        prefix = torch.cat([prompt, torch.tensor([continuation[:i]], dtype=torch.long)], dim=1)
        total += torch.log_softmax(model(prefix).logits[0, -1].double(), dim=-1)[token].item()
    return math.exp(-total / len(continuation))


@pytest.mark.parametrize("continuation", [[4], [4, 7, 2, 2, 9]])
def test_perplexity_matches_token_by_token_loop(one_thread, prompt, continuation):
    model = tiny_llama(0)
    expected = perplexity_by_hand(model, prompt, continuation)
    assert perplexity(model, prompt, continuation) == pytest.approx(expected, rel=1e-5)
    assert perplexity(model, prompt, torch.tensor(continuation)) == pytest.approx(expected, rel=1e-5)


def test_token_nll_is_each_tokens_surprise_and_perplexity_its_exp_mean(one_thread, prompt):
    model, continuation = tiny_llama(0), [4, 7, 2, 2, 9]
    nll = token_nll(model, prompt, continuation)
    assert len(nll) == len(continuation) and all(x > 0 for x in nll)
    assert nll[0] == pytest.approx(math.log(perplexity_by_hand(model, prompt, continuation[:1])), rel=1e-6)
    assert sum(nll[:3]) == pytest.approx(3 * math.log(perplexity_by_hand(model, prompt, continuation[:3])), rel=1e-6)
    assert perplexity(model, prompt, continuation) == pytest.approx(math.exp(sum(nll) / len(nll)), rel=1e-12)


def test_perplexity_of_uniform_model_is_vocab_size(one_thread, prompt):
    model = tiny_llama(0, scale=0.0)  # a zero LM head: every logit is 0, every token has probability 1/VOCAB
    assert perplexity(model, prompt, [1, 5, 9]) == pytest.approx(VOCAB)


def test_perplexity_in_half_precision_returns_a_float(one_thread, prompt):
    model = tiny_llama(0).to(torch.bfloat16)
    result = perplexity(model, prompt, [4, 7, 2])
    assert isinstance(result, float)
    assert math.isfinite(result)


# ------------------------------------------------------------------------------------------ refused inputs
def test_perplexity_refuses_empty_continuation(prompt):
    model = tiny_llama(0)
    with pytest.raises(ValueError, match="continuation is empty"):
        perplexity(model, prompt, [])
    with pytest.raises(ValueError, match="continuation is empty"):
        perplexity(model, prompt, torch.tensor([], dtype=torch.long))


def test_perplexity_refuses_empty_prompt():
    with pytest.raises(ValueError, match="prompt is empty"):
        perplexity(tiny_llama(0), torch.zeros(1, 0, dtype=torch.long), [4])


@pytest.mark.parametrize("metric", [ngram_entropy, distinct_n, rep_n])
@pytest.mark.parametrize("n", [0, -1])
def test_bad_n(metric, n):
    with pytest.raises(ValueError, match="n must be a positive integer"):
        metric("a b c", n)


@pytest.mark.parametrize("text", [None, b"a b", ["a", "b"], 3])
def test_non_str_text(text):
    with pytest.raises(TypeError, match="text must be a str"):
        text_metrics(text)
    with pytest.raises(TypeError, match="text must be a str"):
        distinct_n(text, 1)


def test_summarize_refuses_no_rows():
    with pytest.raises(ValueError, match="rows is empty"):
        summarize([])
