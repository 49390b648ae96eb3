"""Lexical diversity and coherence metrics for generated text: the metrics of notebook 04 ("Evaluation").

* n-gram entropy -- Shannon entropy of the n-gram distribution (the source article's metric).
* distinct-n -- Li et al. 2016, "A Diversity-Promoting Objective Function for Neural Conversation Models".
* rep-n and diversity -- SimCTG (Su et al. 2022), as reported by Li et al. 2022, "Contrastive Decoding".
* perplexity and per-token NLL -- how surprised a model is by a continuation of a prompt (coherence, as judged by
  that model).

Tokens are whitespace-separated words, so every lexical metric is independent of any model's tokenizer.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Hashable, Sequence

import torch


def words(text: str) -> list[str]:
    """The whitespace tokens of ``text``."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return text.split()


def ngrams(tokens: list[str], n: int) -> list[tuple[str, ...]]:
    """All contiguous n-grams of ``tokens``, in order (none when there are fewer than n tokens)."""
    if n < 1:
        raise ValueError(f"n must be a positive integer (1 for words, 2 for bigrams, ...), got {n}")
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def ngram_entropy(text: str, n: int) -> float:
    """Shannon entropy in bits, H = -Σ p(g) log2 p(g), of the n-gram frequencies of ``text`` (the source
    article's metric). 0.0 when the text has fewer than n words."""
    counts = Counter(ngrams(words(text), n))
    total = sum(counts.values())
    return sum(c / total * math.log2(total / c) for c in counts.values())


def unique_share(grams: Sequence[Hashable]) -> float:
    """|unique items| / |items|: distinct-n of a list of n-grams. 0.0 when there are none."""
    return len(set(grams)) / len(grams) if grams else 0.0


def distinct_n(text: str, n: int) -> float:
    """distinct-n = |unique n-grams| / |n-grams|, after Li et al. 2016, who pool all responses and divide by the
    number of generated tokens instead (the same denominator for n = 1). 0.0 when there are no n-grams."""
    return unique_share(ngrams(words(text), n))


def corpus_distinct_n(texts: list[str], n: int) -> float:
    """Corpus-level distinct-n: |unique n-grams| / |n-grams| over all ``texts`` together (n-grams do not cross from
    one text into the next). Unlike a per-text distinct-n it also counts a phrase that a method repeats across
    prompts. 0.0 when there are no n-grams."""
    return unique_share([g for text in texts for g in ngrams(words(text), n)])


def rep_n(text: str, n: int) -> float:
    """rep-n = 1 - |unique n-grams| / |n-grams| (SimCTG; Li et al. 2022): 0 means no repeated n-gram.
    0.0 when there are no n-grams."""
    grams = ngrams(words(text), n)
    return 1 - len(set(grams)) / len(grams) if grams else 0.0


def diversity(text: str) -> float:
    """diversity = Π_{n=2..4} (1 - rep-n) (SimCTG; Li et al. 2022): 1 means no repeated 2-, 3- or 4-gram."""
    return math.prod(1 - rep_n(text, n) for n in (2, 3, 4))


@torch.no_grad()
def token_nll(model, prompt_ids: torch.Tensor, continuation_ids: list[int] | torch.Tensor) -> list[float]:
    """The model's negative log-likelihood, in nats, of every continuation token given the prompt and the tokens
    before it, -log p(x_t | x_<t), from one forward pass over prompt + continuation (float64 log-softmax whatever
    the model's dtype). Their mean over the first L tokens is the "mean NLL at equal length" of notebooks 04–06.

    ``prompt_ids`` is a (1, T) LongTensor on the model's device, T >= 1."""
    continuation = torch.as_tensor(continuation_ids, dtype=torch.long, device=prompt_ids.device)
    continuation = continuation.reshape(1, -1)
    if continuation.shape[1] == 0:
        raise ValueError("the continuation is empty: its likelihood needs at least one continuation token")
    if prompt_ids.shape[1] == 0:
        raise ValueError("the prompt is empty: pass at least one token (e.g. BOS) to condition on")
    start = prompt_ids.shape[1]
    logits = model(torch.cat([prompt_ids, continuation], dim=1)).logits[0]
    # The logits at position t predict token t + 1, so positions start-1 ... end-2 predict the continuation.
    log_probs = torch.log_softmax(logits[start - 1 : -1].double(), dim=-1)
    return (-log_probs.gather(1, continuation[0, :, None])[:, 0]).tolist()


def perplexity(model, prompt_ids: torch.Tensor, continuation_ids: list[int] | torch.Tensor) -> float:
    """The model's perplexity of the continuation given the prompt: exp of the mean of :func:`token_nll`, the
    continuation tokens only. Its mean over texts has heavy tails (one unlikely text dominates); notebooks 04–06
    compare methods by the mean NLL at equal length instead."""
    nll = token_nll(model, prompt_ids, continuation_ids)
    return math.exp(sum(nll) / len(nll))


def text_metrics(text: str) -> dict[str, float]:
    """Every lexical metric of one text."""
    return {
        **{f"entropy-{n}": ngram_entropy(text, n) for n in (1, 2, 3)},
        **{f"distinct-{n}": distinct_n(text, n) for n in (1, 2)},
        **{f"rep-{n}": rep_n(text, n) for n in (2, 3, 4)},
        "diversity": diversity(text),
    }


def summarize(rows: list[dict[str, float]]) -> dict[str, tuple[float, float]]:
    """(mean, sample standard deviation with ddof=1) of every key over ``rows``; the std of one row is 0.0."""
    if not rows:
        raise ValueError("rows is empty: pass at least one dict of metrics (e.g. from text_metrics)")
    summary = {}
    for key in rows[0]:
        values = [row[key] for row in rows]
        summary[key] = (statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0)
    return summary
