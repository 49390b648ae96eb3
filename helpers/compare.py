"""Is method A really better than method B? Paired bootstrap intervals over prompts (notebooks 04, 05, 06).

The committed quality runs (``helpers.quality``) score every continuation; a claim such as "contrastive decoding is
more diverse than greedy" is a claim about the *difference* of two methods on the same prompts. Prompts differ
far more from each other than methods do, so the comparison pairs the two methods prompt by prompt and resamples
prompts (Efron & Tibshirani 1993, the percentile bootstrap): the 95 % interval of the mean difference. A claim of
order is made only when that interval excludes zero.

A cell that labels a dozen differences "real" or "noise" makes a dozen claims at once, and some 5 % intervals
exclude zero by chance alone. Each paired difference therefore also carries the two-sided p-value of the paired
sign-flip test (Fisher 1935: with no difference, each prompt's difference is as likely with either sign), and
:func:`holm` adjusts a family of them (Holm 1979) so that the chance of *any* false "real" in the family stays
below 5 %.

Lexical metrics grow or shrink with the length of a text (entropy grows; diversity falls as more n-grams can
repeat), and a method that ends its turn early writes shorter texts. ``fixed_length=True`` therefore cuts both
methods' continuations of a prompt to the same number of words before scoring them. The expert's likelihood is
compared the same way, as the mean negative log-likelihood per token over the same number of tokens ("mean NLL at
equal length"): a perplexity averaged over texts is dominated by its few largest values.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

import numpy as np

from helpers.metrics import corpus_distinct_n, ngrams, text_metrics, unique_share

MIN_WORDS = 4
"""Prompts whose shorter continuation has fewer words are left out of a fixed-length comparison (4-grams)."""

LIKELIHOOD = "mean NLL"
"""The metric compared in tokens, not words: the expert's mean negative log-likelihood per token (nats)."""


@dataclass(frozen=True)
class Interval:
    """A mean with its 95 % percentile-bootstrap interval, over ``n`` prompts; from :func:`paired_difference` also the
    sign-flip test's two-sided ``p_value`` of "the mean difference is zero" (:func:`sign_flip_p_value`)."""

    mean: float
    low: float
    high: float
    n: int
    p_value: float | None = None

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0

    def __str__(self) -> str:
        return f"{self.mean:+.3f} [{self.low:+.3f}, {self.high:+.3f}]"


def _bootstrap(values: np.ndarray, n_boot: int, seed: int) -> Interval:
    if len(values) < 2:
        raise ValueError(f"need at least 2 prompts to bootstrap, got {len(values)}")
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), size=(n_boot, len(values)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return Interval(float(values.mean()), float(low), float(high), len(values))


SIGN_FLIPS = 20_000
"""Random sign flips per :func:`sign_flip_p_value`: the smallest p it can return is 1 / (SIGN_FLIPS + 1)."""


def sign_flip_p_value(differences: Sequence[float], *, n_flips: int = SIGN_FLIPS, seed: int = 0) -> float:
    """Two-sided p-value of the paired sign-flip (permutation) test of "the mean difference is zero" (Fisher 1935).

    With no difference between the two methods, each prompt's difference is as likely positive as negative, so the
    observed |mean| is compared with the |mean| after flipping every sign at random, ``n_flips`` times:
    p = (flips at least as extreme + 1) / (n_flips + 1), never 0 (Phipson & Smyth 2010).
    """
    values = np.asarray(differences, dtype=float)
    if len(values) < 2:
        raise ValueError(f"need at least 2 paired differences, got {len(values)}")
    signs = np.random.default_rng(seed).choice([-1.0, 1.0], size=(n_flips, len(values)))
    flipped = np.abs((signs * values).mean(axis=1))
    extreme = int((flipped >= abs(values.mean()) - 1e-12).sum())
    return (extreme + 1) / (n_flips + 1)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's (1979) step-down adjusted p-values, in the order given: sorted ascending, the i-th smallest (from 0) is
    multiplied by (m − i) and the results are made non-decreasing, capped at 1. Calling "real" only what has an
    adjusted p below 0.05 keeps the chance of any false "real" among the m comparisons below 5 %."""
    m = len(p_values)
    if m == 0:
        raise ValueError("holm needs at least one p-value")
    if not all(0 <= p <= 1 for p in p_values):
        raise ValueError(f"p-values must lie in [0, 1], got {list(p_values)}")
    adjusted = [0.0] * m
    running = 0.0
    for rank, index in enumerate(sorted(range(m), key=lambda i: p_values[i])):
        running = max(running, min(1.0, (m - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted


def verdict(interval: Interval, adjusted_p: float) -> str:
    """How notebooks 04–06 label a paired difference within a family of comparisons: ``"real"`` when both its
    Holm-adjusted p is below 0.05 and its 95 % interval excludes zero, ``"inside the noise"`` when neither holds,
    ``"not confirmed"`` when the two disagree (typically an interval that excludes zero before the adjustment)."""
    significant = adjusted_p < 0.05
    if significant and interval.excludes_zero:
        return "real"
    return "not confirmed" if significant or interval.excludes_zero else "inside the noise"


K = TypeVar("K", bound=Hashable)
"""The key of one comparison in a family (a metric, or a (method, method, metric) triple)."""


def holm_verdicts(intervals: Mapping[K, Interval]) -> tuple[dict[K, float], dict[K, str]]:
    """One family of paired comparisons at once: each one's Holm-adjusted p (:func:`holm` over the family's sign-flip
    p-values) and its :func:`verdict`, both keyed like ``intervals``."""
    missing = [key for key, interval in intervals.items() if interval.p_value is None]
    if missing:
        raise ValueError(f"no sign-flip p-value for {missing}: build the intervals with paired_difference")
    adjusted = dict(zip(intervals, holm([interval.p_value for interval in intervals.values()]), strict=True))
    return adjusted, {key: verdict(interval, adjusted[key]) for key, interval in intervals.items()}

def _texts(rows: Sequence[dict], method: str) -> dict[str, list[dict]]:
    by_prompt: dict[str, list[dict]] = {}
    for row in rows:
        if row["method"] == method:
            by_prompt.setdefault(row["prompt"], []).append(row)
    if not by_prompt:
        raise ValueError(f"no rows for method {method!r}; methods: {sorted({r['method'] for r in rows})}")
    return by_prompt


def _length(row: dict, metric: str) -> int:
    """A continuation's length as a fixed-length comparison counts it: tokens for the likelihood, else words."""
    if metric != LIKELIHOOD:
        return len(row["text"].split())
    if "nll" not in row:
        raise ValueError("this row has no per-token NLL: add it with python -m helpers.quality --rescore FILE")
    return len(row["nll"])


def _score(row: dict, metric: str, length: int | None) -> float:
    if length is None:
        return float(row[metric])
    if metric == "perplexity":
        raise ValueError("perplexity cannot be cut to a length: compare 'mean NLL' with fixed_length=True instead")
    if metric == LIKELIHOOD:
        return float(np.mean(row["nll"][:length]))
    return float(text_metrics(" ".join(row["text"].split()[:length]))[metric])


def per_prompt(rows: Sequence[dict], method: str, metric: str) -> dict[str, float]:
    """The metric of ``method`` on each prompt, averaged over its samples there."""
    return {prompt: float(np.mean([_score(r, metric, None) for r in rs]))
            for prompt, rs in _texts(rows, method).items()}


def mean_interval(rows: Sequence[dict], method: str, metric: str, *, n_boot: int = 10_000,
                  seed: int = 0) -> Interval:
    """The method's mean metric over prompts, with its 95 % bootstrap interval (for error bars that, unlike
    mean ± std, stay inside the metric's range)."""
    return _bootstrap(np.array(list(per_prompt(rows, method, metric).values())), n_boot, seed)


def paired_difference(rows: Sequence[dict], a: str, b: str, metric: str, *, fixed_length: bool = False,
                      n_boot: int = 10_000, seed: int = 0) -> Interval:
    """Mean over prompts of metric(a) − metric(b), each averaged over its samples, with its 95 % paired bootstrap
    interval. ``fixed_length``: score both methods' continuations of a prompt cut to the same length (the shortest
    of them), in words for the lexical metrics, in tokens for ``"mean NLL"``; prompts with fewer than
    :data:`MIN_WORDS` words (lexical) or no token (likelihood) in it are left out."""
    texts_a, texts_b = _texts(rows, a), _texts(rows, b)
    shared = [p for p in texts_a if p in texts_b]
    diffs = []
    for prompt in shared:
        length = None
        if fixed_length:
            length = min(_length(r, metric) for r in texts_a[prompt] + texts_b[prompt])
            if length < (1 if metric == LIKELIHOOD else MIN_WORDS):
                continue
        diffs.append(np.mean([_score(r, metric, length) for r in texts_a[prompt]])
                     - np.mean([_score(r, metric, length) for r in texts_b[prompt]]))
    interval = _bootstrap(np.array(diffs), n_boot, seed)
    return replace(interval, p_value=sign_flip_p_value(diffs, seed=seed))


def corpus_verdict(adjusted_p: float) -> str:
    """The verdict on a corpus-level difference (:func:`corpus_distinct`), which has no interval: ``"real"`` when its
    Holm-adjusted permutation p is below 0.05, else ``"inside the noise"`` (00's notation box)."""
    return "real" if adjusted_p < 0.05 else "inside the noise"


def _first_texts_at_equal_length(rows: Sequence[dict], methods: Sequence[str]) -> list[list[str]]:
    """Per shared prompt, each method's first continuation, all cut to the shortest one's words (prompts under
    :data:`MIN_WORDS` words left out)."""
    by_method = [{prompt: rs[0]["text"] for prompt, rs in _texts(rows, m).items()} for m in methods]
    out = []
    for prompt in (p for p in by_method[0] if all(p in texts for texts in by_method)):
        length = min(len(texts[prompt].split()) for texts in by_method)
        if length >= MIN_WORDS:
            out.append([" ".join(texts[prompt].split()[:length]) for texts in by_method])
    return out


def corpus_distinct(rows: Sequence[dict], a: str, b: str, n: int, *, n_perm: int = 2_000,
                    seed: int = 0) -> tuple[float, float, float, int]:
    """Corpus-level distinct-n (:func:`helpers.metrics.corpus_distinct_n`) of two methods over the prompts they
    share, one continuation per prompt and method (the first sample), both cut to the shorter one's words: returns
    (a's, b's, the two-sided p-value of their difference, prompts). The statistic pools every prompt, so it is not a
    mean over prompts and a bootstrap over prompts would count a resampled prompt's n-grams as repeats; the p-value
    comes from a paired permutation test instead: with no difference, the two continuations of a prompt are
    exchangeable, so their labels are swapped at random in each prompt, ``n_perm`` times."""
    pairs = _first_texts_at_equal_length(rows, (a, b))
    if len(pairs) < 2:
        raise ValueError(f"need at least 2 prompts with {MIN_WORDS}+ words from both methods, got {len(pairs)}")
    grams = [[[hash(g) for g in ngrams(text.split(), n)] for text in pair] for pair in pairs]

    def distinct(side: Sequence[int]) -> float:  # corpus_distinct_n on pre-split n-grams, for the permutations
        return unique_share([g for prompt, s in zip(grams, side, strict=True) for g in prompt[s]])

    value_a, value_b = (corpus_distinct_n([pair[side] for pair in pairs], n) for side in (0, 1))
    swaps = np.random.default_rng(seed).integers(0, 2, size=(n_perm, len(pairs)))
    extreme = sum(abs(distinct(swap) - distinct(1 - swap)) >= abs(value_a - value_b) - 1e-12 for swap in swaps)
    return value_a, value_b, (extreme + 1) / (n_perm + 1), len(pairs)


def ends_early(rows: Sequence[dict], method: str, max_new_tokens: int) -> int:
    """How many of the method's continuations stopped before ``max_new_tokens`` (at the end-of-turn token)."""
    return sum(1 for rs in _texts(rows, method).values() for r in rs if r["n_tokens"] < max_new_tokens)


def mean_of(values: Sequence[float], *, n_boot: int = 10_000, seed: int = 0) -> Interval:
    """The mean of per-prompt values (e.g. paired differences of two decoders' α, prompt by prompt) with its 95 %
    bootstrap interval over prompts (notebook 07)."""
    return _bootstrap(np.asarray(values, dtype=float), n_boot, seed)


def sign_test(differences: Sequence[float]) -> tuple[int, int, float]:
    """How many paired differences are positive, of how many non-zero ones, and the one-sided exact sign test's
    p-value P(at least that many | each sign a fair coin) (Dixon & Mood 1946): a claim of order from a handful of
    prompts, too few for a bootstrap interval (notebook 07's live α comparison on 6 prompts)."""
    signs = [d > 0 for d in differences if d != 0]
    wins, n = sum(signs), len(signs)
    if n == 0:
        raise ValueError("every difference is zero: the sign test has nothing to count")
    return wins, n, sum(math.comb(n, k) for k in range(wins, n + 1)) / 2 ** n


def median_interval(groups: Sequence[Sequence[float]], *, n_boot: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """95 % percentile-bootstrap interval of the median of all values, resampling whole groups (``helpers.bench``:
    one group of per-round speedups per prompt, since rounds of one prompt are not independent of each other)."""
    if len(groups) < 2 or not all(groups):
        raise ValueError(f"need at least 2 non-empty groups to bootstrap, got {[len(g) for g in groups]}")
    rng = np.random.default_rng(seed)
    arrays = [np.asarray(g, dtype=float) for g in groups]
    medians = [float(np.median(np.concatenate([arrays[i] for i in rng.integers(0, len(arrays), len(arrays))])))
               for _ in range(n_boot)]
    low, high = np.percentile(medians, [2.5, 97.5])
    return float(low), float(high)
