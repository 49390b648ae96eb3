"""helpers.decoding: exactness (statistically, and exactly for one round), greedy equality, cache correctness,
agreement with transformers, and every refused input. Tiny random models keep this fast; the pocket pair is used
where real text matters."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from conftest import EOS, VOCAB, tiny_llama

from helpers import decoding
from helpers.bench_configs import assistant_drafts, quiet_transformers
from helpers.decoding import (
    contrastive,
    contrastive_search,
    core,
    dola,
    dola_low_layers,
    jensen_shannon,
    lookup_draft,
    naive,
    penalize_repetition,
    probabilities,
    prompt_lookup,
    speculation,
    speculative,
)
from helpers.stats import exact_distribution, exact_first_two, first_two_counts, goodness_of_fit, round_error

N_RUNS = 3_000
"""Seeded runs of each chi-square test. What the runs add to the exact one-round enumeration below (which replaces
the decoders' draws by scripted ones and proves each round exact to 1e-6) is the real sampler: torch's categorical
and Bernoulli draws, across rounds. A bias as gross as the source article's (TV 0.32 from the expert's
distribution of the first two tokens) is over three times the 99th-percentile TV of exact sampling at 3,000 runs
(0.092); a subtle bias (TV ≈ 0.01) is left to the enumeration, whose negative controls catch it. Each run is a
whole decode of a few ~1 ms transformers forward passes, so the runs are what these tests cost."""
CONTROL_RUNS = 1_000
"""Runs of the negative control: the article's bias (TV 0.32) is twice the 99th-percentile TV of exact sampling
at 1,000 runs (about 0.16), so fewer runs than the exactness tests suffice to reject it."""
LOOKUP_PROMPT = torch.tensor([[2, 8, 7, 2]])
"""Its last token 2 occurred before, followed by 8 7: prompt lookup drafts [8, 7] at once. The tiny expert's
p(8 | prompt) = 0.23 (its favourite), so the draft is accepted about a quarter of the time, rejected otherwise."""
LOOKUP_RUNS = 3_000
EXACT_TOLERANCE = 1e-6
"""The exact one-round check: TV between a round continued by the expert and the expert alone, float rounding only
(2e-8 .. 5e-8 here)."""
BIASED = 1e-3
"""What the negative controls must exceed: far above float rounding, below their smallest bias (0.011)."""
T1, TOP3 = {"temperature": 1.0}, {"temperature": 0.7, "top_k": 3}


def exact_id(value):
    """Readable test ids: T0.7-top_k3-gamma2."""
    if isinstance(value, dict):
        return "-".join(f"{'T' if k == 'temperature' else k}{v}" for k, v in value.items())
    return f"gamma{value}"


@pytest.fixture(scope="module")
def deep():
    """A 6-layer tiny model whose DoLa steps contrast with several different early layers."""
    return tiny_llama(5, layers=6)


# ------------------------------------------------------------------------------------------ exactness
@pytest.mark.parametrize(("warp", "gamma", "max_new_tokens"), [
    ({"temperature": 1.0, "top_k": 4}, 2, 3),    # two drafts judged in one expert pass; nothing outside the top-k
    ({"temperature": 0.7}, 1, 2),                # the bonus token is the second token
])
def test_speculative_matches_expert_distribution(tiny_pair, prompt, one_thread, warp, gamma, max_new_tokens):
    """The real draws (not scripted ones) give the expert's distribution of the first two tokens: with two
    drafts judged in one expert pass (γ = 2), across the bonus token (γ = 1), and never a token outside the top-k.
    (Plain temperature 1 at γ = 2 is not run separately: the draws are the same two functions whatever the warp,
    and the exact enumeration proves every warp's round.)"""
    expert, amateur = tiny_pair
    exact = exact_first_two(expert, prompt, **warp)
    counts = first_two_counts(lambda g: speculative(
        expert, amateur, prompt, max_new_tokens=max_new_tokens, gamma=gamma, generator=g, **warp).new_token_ids,
        VOCAB, N_RUNS)
    assert_exact(counts, exact)


def assert_exact(counts, exact):
    """The sampled first two tokens fit the exact distribution (chi-square, and TV within sampling noise)."""
    fit = goodness_of_fit(counts, exact)
    assert fit.impossible == 0, "the sampler emitted a token pair the expert gives probability 0"
    assert fit.p_value > 1e-3, fit
    assert fit.tv <= fit.tv_noise, fit


def test_prompt_lookup_matches_the_model_distribution(tiny_pair, one_thread):
    """Point-mass drafts through the same modified rejection sampling: exact, like speculative."""
    expert, _ = tiny_pair
    assert lookup_draft(LOOKUP_PROMPT[0].tolist(), 2) == [8, 7]
    exact = exact_first_two(expert, LOOKUP_PROMPT)
    counts = first_two_counts(lambda g: prompt_lookup(
        expert, LOOKUP_PROMPT, max_new_tokens=3, gamma=2, generator=g).new_token_ids, VOCAB, LOOKUP_RUNS)
    assert_exact(counts, exact)
    accepted_first = counts.view(VOCAB, VOCAB)[8].sum() / LOOKUP_RUNS
    assert 0.15 < accepted_first < 0.35  # both paths taken: the draft's first token accepted and rejected


def test_the_source_articles_sampler_fails_the_same_test(tiny_pair, prompt, one_thread):
    """The negative control: the same test run on the article's loop detects its bias."""
    from helpers.seed_reference import speculative_decoding

    expert, amateur = tiny_pair
    exact = exact_first_two(expert, prompt)
    counts = first_two_counts(lambda g: speculative_decoding(
        expert, amateur, prompt, n_tokens=2, max_length=prompt.shape[1] + 4, generator=g),  # +4: >= 2 tokens
        VOCAB, CONTROL_RUNS)
    fit = goodness_of_fit(counts, exact)
    assert fit.p_value < 1e-3 and fit.tv > fit.tv_noise, fit


def first_round(decode, gamma):
    """P(y) for every output y of the first round of ``decode()`` (a Generation with a trace), from every path through
    its γ + 1 categorical draws (γ drafts, then the expert's token) and the acceptance draws between them."""
    return exact_distribution(lambda: tuple(decode().trace[0].emitted), branching_draws=gamma + 1)


@pytest.mark.parametrize(("warp", "gamma"), [
    (T1, 1), (T1, 2),                            # the bonus token is the 2nd / 3rd token
    (TOP3, 1), (TOP3, 2), (TOP3, 3),             # top-k: tokens outside it must get exactly 0
    ({"temperature": 1.0, "top_p": 0.8}, 2),     # nucleus
], ids=exact_id)
def test_one_speculative_round_is_exact(exact_pair, prompt, one_thread, warp, gamma):
    """Point 17: no sampling noise. Every path through one round of the real :func:`speculative` (drafts, acceptance
    draws, resampled or bonus token) is enumerated in float64; the round, continued by the expert, must give the
    expert's distribution of γ + 1 tokens to 1e-6. Both endings happen with positive probability."""
    expert, amateur = exact_pair
    outputs = first_round(lambda: speculative(expert, amateur, prompt, max_new_tokens=gamma + 1, gamma=gamma,
                                              **warp), gamma)
    assert sum(outputs.values()) == pytest.approx(1.0, abs=1e-12)
    assert sum(p for y, p in outputs.items() if len(y) == gamma + 1) > 0.01  # all accepted + the bonus token
    assert sum(p for y, p in outputs.items() if len(y) <= gamma) > 0.01  # a rejection + the resampled token
    assert round_error(outputs, expert, prompt, gamma + 1, **warp) < EXACT_TOLERANCE


@pytest.mark.parametrize("warp", [T1, TOP3], ids=exact_id)
def test_a_dynamic_draft_length_keeps_the_round_exact(exact_pair, prompt, one_thread, warp):
    """Issue 12, point 3: the amateur stops drafting after a token it is unsure of (confidence_threshold). Where a
    draft stops depends on the draft alone, so the round stays exact; both a short and a full draft occur."""
    expert, amateur = exact_pair
    gamma, lengths = 3, set()

    def decode():
        run = speculative(expert, amateur, prompt, max_new_tokens=gamma + 1, gamma=gamma, confidence_threshold=0.2,
                          **warp)
        lengths.add(len(run.trace[0].draft))
        return tuple(run.trace[0].emitted)

    outputs = exact_distribution(decode, branching_draws=gamma + 1)
    assert min(lengths) < gamma and max(lengths) == gamma, lengths
    assert round_error(outputs, expert, prompt, gamma + 1, **warp) < EXACT_TOLERANCE


@pytest.mark.parametrize(("warp", "gamma"), [(T1, 2), (TOP3, 3)], ids=exact_id)
def test_one_prompt_lookup_round_is_exact(exact_pair, one_thread, warp, gamma):
    """The same check for point-mass drafts: [2, 4, 5, 2] drafts what followed the earlier 2."""
    expert, _ = exact_pair
    lookup_prompt = torch.tensor([[2, 4, 5, 2]])
    outputs = exact_distribution(lambda: tuple(prompt_lookup(
        expert, lookup_prompt, max_new_tokens=gamma + 1, gamma=gamma, **warp).trace[0].emitted), branching_draws=1)
    assert max(len(y) for y in outputs) >= 2  # the first draft token is accepted on some paths
    assert round_error(outputs, expert, lookup_prompt, gamma + 1, **warp) < EXACT_TOLERANCE


@pytest.mark.parametrize(("warp", "gamma"), [(T1, 1), (T1, 2), (TOP3, 2), (TOP3, 3)], ids=exact_id)
def test_a_bonus_token_drawn_from_p_gamma_fails_the_exact_check(exact_pair, prompt, one_thread, monkeypatch,
                                                                 warp, gamma):
    """Negative control (b): the real sampler, except that the expert's last row p_{γ+1} is replaced by p_γ, so the
    bonus token is drawn from the distribution that judged the last draft."""
    expert, amateur = exact_pair
    real = speculation.probabilities

    def last_row_repeated(logits, *args, **kwargs):
        probs = real(logits, *args, **kwargs)
        return torch.cat([probs[:-1], probs[-2:-1]]) if probs.dim() == 2 and len(probs) > 1 else probs

    monkeypatch.setattr(speculation, "probabilities", last_row_repeated)
    outputs = first_round(lambda: speculative(expert, amateur, prompt, max_new_tokens=gamma + 1, gamma=gamma,
                                              **warp), gamma)
    assert round_error(outputs, expert, prompt, gamma + 1, **warp) > BIASED  # 0.011 .. 0.17


def speculative_with_draft_filters(expert, amateur, prompt, gamma, draw_top_k, judge_top_k):
    """:func:`speculative` at T=0.7, top-k=3 (for p), whose drafts are drawn from q filtered with ``draw_top_k`` and
    judged (acceptance min(1, p/q), residual max(0, p - q)) with q filtered with ``judge_top_k``."""
    exp, ama = decoding.CachedModel(expert, prompt), decoding.CachedModel(amateur, prompt)

    def propose(n_draft):
        ama.follow(exp.tokens)
        draft, judged = [], []
        for _ in range(n_draft):
            logits = ama.logits()[-1]
            draft.append(core.sample(probabilities(logits, TOP3["temperature"], draw_top_k)))
            judged.append(probabilities(logits, TOP3["temperature"], judge_top_k))
            ama.append(draft[-1:])
        return draft, judged

    return decoding.draft_and_verify(exp, propose, max_new_tokens=gamma + 1, gamma=gamma, top_p=None,
                                      generator=None, eos=frozenset(), **TOP3)


@pytest.mark.parametrize(("draw_top_k", "judge_top_k", "exact"), [
    (3, 3, True),          # as speculative does
    (None, None, True),    # q unfiltered while p is top-k filtered: still exact, modified rejection takes any q
    (3, None, False),      # negative control (a): drawn from the filtered q, judged with the unfiltered one
    (None, 3, False),      # ... and the other way round
], ids=["drawn-top3-judged-top3", "drawn-unfiltered-judged-unfiltered", "drawn-top3-judged-unfiltered",
        "drawn-unfiltered-judged-top3"])
def test_a_draft_judged_with_another_q_than_it_was_drawn_from_fails_the_exact_check(
        exact_pair, prompt, one_thread, draw_top_k, judge_top_k, exact):
    """Negative control (a). Leviathan et al.'s proof holds for any q, so a q without p's top-k filter is exact
    (only slower); what breaks exactness is judging a draft with another q than the one it was drawn from."""
    expert, amateur = exact_pair
    gamma = 2
    outputs = first_round(lambda: speculative_with_draft_filters(expert, amateur, prompt, gamma, draw_top_k,
                                                                 judge_top_k), gamma)
    error = round_error(outputs, expert, prompt, gamma + 1, **TOP3)
    assert error < EXACT_TOLERANCE if exact else error > BIASED, error  # 0.22, 0.32


def test_models_are_different_enough_for_the_test_to_see_a_bias(tiny_pair, prompt):
    expert, amateur = tiny_pair
    with torch.no_grad():
        p, q = (torch.softmax(m(prompt).logits[0, -1], -1) for m in tiny_pair)
    assert 0.2 < 0.5 * (p - q).abs().sum() < 0.9, "expert and amateur should disagree clearly, not totally"
    assert p.max() > 2 / VOCAB, "the expert's distribution should be far from uniform"
    del expert, amateur


# ----------------------------------------------------------------------------------- greedy equality
@pytest.mark.parametrize("gamma", range(1, 9))
def test_greedy_speculative_equals_greedy_expert(tiny_pair, prompt, gamma):
    expert, amateur = tiny_pair
    reference = naive(expert, prompt, max_new_tokens=30, temperature=0).new_token_ids
    result = speculative(expert, amateur, prompt, max_new_tokens=30, gamma=gamma, temperature=0)
    assert result.new_token_ids == reference
    assert result.stats.expert_calls <= 30


def test_greedy_speculative_with_itself_as_draft_accepts_everything(tiny_pair, prompt):
    expert, _ = tiny_pair
    result = speculative(expert, expert, prompt, max_new_tokens=20, gamma=4, temperature=0)
    assert result.stats.share_kept == 1.0
    assert result.stats.mean_beta == pytest.approx(1.0)
    assert result.stats.expert_calls == 4  # 5 tokens per call: 4 drafts + the bonus token


@pytest.mark.pocket
@pytest.mark.parametrize("gamma", [1, 3, 5, 8])
def test_greedy_speculative_equals_greedy_expert_on_the_pocket_pair(pocket, gamma):
    prompt = pocket.encode("Stanford is known for")
    reference = naive(pocket.expert, prompt, max_new_tokens=24, temperature=0).new_token_ids
    result = speculative(pocket.expert, pocket.amateur, prompt, max_new_tokens=24, gamma=gamma, temperature=0)
    assert result.new_token_ids == reference


@pytest.mark.parametrize(("gamma", "max_ngram"), [(1, 1), (3, 2), (10, 3), (10, 5)])
def test_greedy_prompt_lookup_equals_greedy(tiny_pair, prompt, gamma, max_ngram):
    expert, _ = tiny_pair
    reference = naive(expert, prompt, max_new_tokens=30, temperature=0).new_token_ids
    result = prompt_lookup(expert, prompt, max_new_tokens=30, gamma=gamma, max_ngram=max_ngram, temperature=0)
    assert result.new_token_ids == reference
    assert result.stats.accepted > 0  # the tiny model's greedy output cycles: copies get accepted
    assert result.stats.expert_calls < 30


@pytest.mark.pocket
def test_greedy_prompt_lookup_equals_greedy_on_the_pocket_model(pocket):
    prompt = pocket.encode("Repeat after me: the quick brown fox jumps over the lazy dog. "
                           "Repeat after me: the quick brown fox")
    reference = naive(pocket.expert, prompt, max_new_tokens=16, temperature=0).new_token_ids
    result = prompt_lookup(pocket.expert, prompt, max_new_tokens=16, temperature=0)
    assert result.new_token_ids == reference
    assert result.stats.accepted >= 4, result.stats
    assert result.stats.expert_calls < 16


def test_lookup_draft_copies_what_followed_the_last_ngram():
    assert lookup_draft([1, 2, 3, 9, 2, 3, 8, 2, 3], 2) == [8, 2]  # the most recent earlier "2 3"
    assert lookup_draft([5, 1, 2, 3, 7, 0, 2, 3, 6, 1, 2, 3], 3) == [7, 0, 2]  # "1 2 3" beats the later "2 3"
    assert lookup_draft([1, 2, 3, 1, 2, 3], 4, max_ngram=1) == [1, 2, 3]  # "3" alone: copy up to 4 tokens
    assert lookup_draft([4, 4], 5) == [4]  # the match may overlap the n-gram it is a copy of
    assert lookup_draft([1, 2, 3], 5) == []  # nothing repeats: no draft
    assert lookup_draft([1, 2, 1], 0) == []
    assert lookup_draft([7], 3) == []


def test_prompt_lookup_stats_and_trace(tiny_pair):
    expert, _ = tiny_pair
    g = torch.Generator().manual_seed(3)
    result = prompt_lookup(expert, LOOKUP_PROMPT, max_new_tokens=40, gamma=4, generator=g)
    stats = result.stats
    assert len(result.new_token_ids) == 40 and stats.amateur_calls == 0
    assert stats.expert_calls == len(stats.accepted_per_iteration) == len(result.trace)
    assert stats.accepted == sum(stats.accepted_per_iteration) > 0
    assert stats.proposed == sum(len(it.draft) for it in result.trace) > stats.accepted
    assert [t for it in result.trace for t in it.emitted] == result.new_token_ids
    judged = [p for it in result.trace for p in it.p_draft[:it.n_accepted + 1]]
    assert stats.betas == pytest.approx(judged)  # β = Σ min(p, q) = p(x) for a point mass q
    assert all(q == 1.0 for it in result.trace for q in it.q_draft)
    assert any(not it.draft for it in result.trace)  # rounds without a match: a plain step
    assert len(stats.round_seconds) == len(result.trace) and all(t > 0 for t in stats.round_seconds)
    steps = naive(expert, LOOKUP_PROMPT, max_new_tokens=5).stats.round_seconds
    assert len(steps) == 5 and all(t > 0 for t in steps), "naive decoding times every step"


# ---------------------------------------------------------------------------------------- KV caches
def test_naive_with_and_without_cache_agree(tiny_pair, prompt):
    expert, _ = tiny_pair
    cached = naive(expert, prompt, max_new_tokens=25, temperature=0)
    plain = naive(expert, prompt, max_new_tokens=25, temperature=0, use_cache=False)
    assert cached.new_token_ids == plain.new_token_ids


def test_naive_sampling_with_and_without_cache_agree_for_one_seed(tiny_pair, prompt):
    expert, _ = tiny_pair
    runs = [naive(expert, prompt, max_new_tokens=25, use_cache=c, generator=torch.Generator().manual_seed(5))
            for c in (True, False)]
    assert runs[0].new_token_ids == runs[1].new_token_ids


@torch.no_grad()
def contrastive_without_cache(expert, amateur, ids, max_new_tokens, alpha, tau):
    """Li et al. written plainly: recompute both models on the whole prefix at every step."""
    out = []
    for _ in range(max_new_tokens):
        log_p_exp = torch.log_softmax(expert(ids).logits[0, -1], -1)
        log_p_ama = torch.log_softmax(amateur(ids).logits[0, -1] / tau, -1)
        plausible = log_p_exp.exp() >= alpha * log_p_exp.exp().max()
        score = torch.where(plausible, log_p_exp - log_p_ama, torch.tensor(-math.inf))
        out.append(int(score.argmax()))
        ids = torch.cat([ids, torch.tensor([[out[-1]]])], dim=1)
    return out


@pytest.mark.parametrize(("alpha", "tau"), [(0.1, 1.0), (0.5, 0.5), (1e-4, 1.0)])
def test_contrastive_equals_a_plain_reference(tiny_pair, prompt, alpha, tau):
    expert, amateur = tiny_pair
    result = contrastive(expert, amateur, prompt, max_new_tokens=20, alpha=alpha, amateur_temperature=tau)
    assert result.new_token_ids == contrastive_without_cache(expert, amateur, prompt, 20, alpha, tau)
    assert result.stats.expert_calls == result.stats.amateur_calls == 20


def test_contrastive_with_alpha_one_is_greedy(tiny_pair, prompt):
    expert, amateur = tiny_pair
    result = contrastive(expert, amateur, prompt, max_new_tokens=20, alpha=1.0)
    assert result.new_token_ids == naive(expert, prompt, max_new_tokens=20, temperature=0).new_token_ids


def test_contrastive_trace_describes_each_decision(tiny_pair, prompt):
    expert, amateur = tiny_pair
    result = contrastive(expert, amateur, prompt, max_new_tokens=5, alpha=0.1)
    for step, token in zip(result.trace, result.new_token_ids, strict=True):
        assert step.chosen == token
        assert step.candidates[0].in_head  # the expert's favourite is always plausible
        chosen = [c for c in step.candidates if c.token_id == token]
        assert chosen and chosen[0].in_head
        assert chosen[0].score == max(c.score for c in step.candidates if c.in_head)


@torch.no_grad()
def contrastive_search_without_cache(model, ids, max_new_tokens, alpha, k):
    """Su et al. Eq. (5) written plainly: every candidate gets a full forward pass of its own."""
    out = []
    for _ in range(max_new_tokens):
        run = model(ids, output_hidden_states=True)
        context = run.hidden_states[-1][0]  # the last hidden state of every token so far
        scores = {}
        for p_v, v in zip(*torch.topk(torch.softmax(run.logits[0, -1], -1), k), strict=True):
            h_v = model(torch.cat([ids, v.view(1, 1)], dim=1), output_hidden_states=True).hidden_states[-1][0, -1]
            scores[int(v)] = (1 - alpha) * p_v - alpha * torch.cosine_similarity(h_v[None], context).max()
        out.append(max(scores, key=scores.get))
        ids = torch.cat([ids, torch.tensor([[out[-1]]])], dim=1)
    return out


@torch.no_grad()
def dola_without_cache(model, ids, max_new_tokens, layers, alpha, penalty):
    """Chuang et al. written plainly: the whole sequence again at every step, one early exit at a time."""
    out = []
    for _ in range(max_new_tokens):
        run = model(ids, output_hidden_states=True)
        final = torch.softmax(run.logits[0, -1], -1)
        jsd = {}
        for j in layers:
            early = torch.softmax(model.lm_head(model.model.norm(run.hidden_states[j][0, -1])), -1)
            mean = (final + early) / 2
            jsd[j] = 0.5 * (final * (final / mean).log()).sum() + 0.5 * (early * (early / mean).log()).sum()
        premature = max(jsd, key=jsd.get)
        early = torch.softmax(model.lm_head(model.model.norm(run.hidden_states[premature][0, -1])), -1)
        score = torch.where(final >= alpha * final.max(), final.log() - early.log(), torch.tensor(-math.inf))
        for t in set(ids[0].tolist()):
            score[t] = score[t] * penalty if score[t] < 0 else score[t] / penalty
        out.append(int(score.argmax()))
        ids = torch.cat([ids, torch.tensor([[out[-1]]])], dim=1)
    return out


@pytest.mark.parametrize(("alpha", "k"), [(0.6, 4), (0.3, 2), (1.0, VOCAB)])
def test_contrastive_search_equals_a_plain_reference(tiny_pair, prompt, alpha, k):
    expert, _ = tiny_pair
    result = contrastive_search(expert, prompt, max_new_tokens=20, penalty_alpha=alpha, top_k=k)
    assert result.new_token_ids == contrastive_search_without_cache(expert, prompt, 20, alpha, k)
    assert result.stats.expert_calls == 21  # the prompt, then one batched pass per token


def test_contrastive_search_without_penalty_is_greedy(tiny_pair, prompt):
    expert, _ = tiny_pair
    result = contrastive_search(expert, prompt, max_new_tokens=25, penalty_alpha=0.0, top_k=5)
    assert result.new_token_ids == naive(expert, prompt, max_new_tokens=25, temperature=0).new_token_ids


def test_contrastive_search_trace(tiny_pair, prompt):
    expert, _ = tiny_pair
    result = contrastive_search(expert, prompt, max_new_tokens=10, penalty_alpha=0.6, top_k=3)
    assert [step.chosen for step in result.trace] == result.new_token_ids
    for step in result.trace:
        assert len(step.token_ids) == len(step.probs) == len(step.degeneration) == 3
        assert step.probs == sorted(step.probs, reverse=True)
        assert all(-1 - 1e-5 <= c <= 1 + 1e-5 for c in step.degeneration)
        scores = [0.4 * p - 0.6 * c for p, c in zip(step.probs, step.degeneration, strict=True)]
        assert step.chosen == step.token_ids[scores.index(max(scores))]
    assert any(step.chosen != step.token_ids[0] for step in result.trace)  # the penalty changes decisions


@pytest.mark.parametrize(("layers", "alpha", "penalty"), [
    (None, 0.1, 1.2), ([0, 1, 2, 3, 4, 5], 0.1, 1.2), ([0, 1, 2, 3, 4, 5], 0.3, 1.0), ([3], 0.1, 2.0)])
def test_dola_equals_a_plain_reference(deep, prompt, layers, alpha, penalty):
    result = dola(deep, prompt, max_new_tokens=20, premature_layers=layers, alpha=alpha, repetition_penalty=penalty)
    reference = dola_without_cache(deep, prompt, 20, layers or dola_low_layers(deep), alpha, penalty)
    assert result.new_token_ids == reference
    assert result.stats.expert_calls == 20


def test_dola_trace_records_the_premature_layer_of_every_step(deep, prompt):
    layers = [0, 1, 2, 3, 4, 5]
    result = dola(deep, prompt, max_new_tokens=16, premature_layers=layers)
    assert [step.token for step in result.trace] == result.new_token_ids
    for step in result.trace:
        assert list(step.jsd) == layers
        assert step.chosen_layer == max(step.jsd, key=step.jsd.get)
        assert all(0 <= d <= math.log(2) for d in step.jsd.values())
    assert len({step.chosen_layer for step in result.trace}) > 1  # the premature layer changes from step to step
    assert {s.chosen_layer for s in dola(deep, prompt, max_new_tokens=8).trace} <= set(dola_low_layers(deep))


def test_dola_without_the_final_norm_reads_raw_hidden_states(deep, prompt):
    """``final_norm=False``: the early exits are lm_head(h_j), as in the paper's code (voidism/DoLa#9)."""
    layers = [0, 1, 2, 3, 4, 5]
    raw = dola(deep, prompt, max_new_tokens=1, premature_layers=layers, final_norm=False).trace[0]
    with torch.no_grad():
        out = deep(prompt, output_hidden_states=True)
        log_final = torch.log_softmax(out.logits[0, -1].float(), dim=-1)
        early = deep.lm_head(torch.stack([out.hidden_states[j][0, -1] for j in layers])).float()
    jsd = jensen_shannon(log_final, torch.log_softmax(early, dim=-1))
    assert raw.jsd == pytest.approx(dict(zip(layers, jsd.tolist(), strict=True)), abs=1e-5)
    normed = dola(deep, prompt, max_new_tokens=1, premature_layers=layers).trace[0]
    assert raw.jsd != pytest.approx(normed.jsd, abs=1e-5)
    with pytest.raises(TypeError, match="final_norm"):
        dola(deep, prompt, max_new_tokens=1, final_norm="no")


def test_dola_with_alpha_one_is_greedy(deep, prompt):
    """V_head = {argmax q_N}: the contrast and the repetition penalty have nothing left to choose from."""
    assert (dola(deep, prompt, max_new_tokens=20, alpha=1.0).new_token_ids
            == naive(deep, prompt, max_new_tokens=20, temperature=0).new_token_ids)


def _fake_model(n_layers, tied):
    embedding = SimpleNamespace(weight=torch.zeros(1))
    head = embedding if tied else SimpleNamespace(weight=torch.zeros(1))
    return SimpleNamespace(config=SimpleNamespace(num_hidden_layers=n_layers),
                           get_input_embeddings=lambda: embedding, get_output_embeddings=lambda: head)


@pytest.mark.parametrize(("n_layers", "tied", "expected"), [
    (1, False, [0]), (2, False, [0]), (6, False, [0, 2]), (32, False, list(range(0, 16, 2))),
    (48, False, list(range(0, 20, 2))), (30, True, list(range(2, 15, 2))), (48, True, list(range(2, 20, 2))),
    (4, True, [2]), (3, True, [2]), (2, True, [1]), (1, True, [0])])
def test_dola_low_layers_follow_transformers(n_layers, tied, expected):
    """transformers' "low" bucket: every second layer of the first half (at most 0..18); tied heads skip the
    embedding output. A 3-layer tied model gets [2] where transformers' rule gave an empty list."""
    assert dola_low_layers(_fake_model(n_layers, tied)) == expected


def test_jensen_shannon_and_repetition_penalty():
    log_p = torch.log_softmax(torch.tensor([2.0, 0.0, -1.0]), -1)
    log_q = torch.log_softmax(torch.tensor([-1.0, 1.0, 0.5]), -1)
    assert float(jensen_shannon(log_p, log_p)) == pytest.approx(0, abs=1e-7)
    assert float(jensen_shannon(log_p, log_q)) == pytest.approx(float(jensen_shannon(log_q, log_p)))
    one_hot = torch.log(torch.tensor([[1.0, 1e-30], [1e-30, 1.0]]))
    assert float(jensen_shannon(one_hot[0], one_hot[1])) == pytest.approx(math.log(2))  # disjoint: the maximum
    assert jensen_shannon(log_p, torch.stack([log_p, log_q])).shape == (2,)
    scores = torch.tensor([2.0, -2.0, 1.0, -math.inf])
    penalized = penalize_repetition(scores, torch.tensor([0, 1, 1, 3]), 2.0)
    assert penalized.tolist() == [1.0, -4.0, 1.0, -math.inf]
    assert scores.tolist() == [2.0, -2.0, 1.0, -math.inf]  # the input is left alone


@pytest.mark.pocket
def test_contrastive_search_and_dola_equal_their_references_on_the_pocket_model(pocket):
    model, prompt = pocket.expert, pocket.encode("The capital of France is")
    searched = contrastive_search(model, prompt, max_new_tokens=10, penalty_alpha=0.6, top_k=4)
    assert searched.new_token_ids == contrastive_search_without_cache(model, prompt, 10, 0.6, 4)
    layers = dola_low_layers(model)
    assert layers == list(range(2, 15, 2))  # 30 layers, LM head tied to the embeddings
    result = dola(model, prompt, max_new_tokens=10)
    assert result.new_token_ids == dola_without_cache(model, prompt, 10, layers, 0.1, 1.2)
    assert {step.chosen_layer for step in result.trace} <= set(layers)


# ------------------------------------------------------------------------------ against transformers
def test_naive_greedy_equals_generate(tiny_pair, prompt):
    expert, _ = tiny_pair
    ours = naive(expert, prompt, max_new_tokens=30, temperature=0).new_token_ids
    theirs = expert.generate(prompt, do_sample=False, max_new_tokens=30, eos_token_id=None)
    assert ours == theirs[0, prompt.shape[1]:].tolist()


@pytest.mark.parametrize(("temperature", "top_k"), [(0, None), (0.8, 20)])
def test_naive_repetition_penalty_equals_generate(tiny_pair, prompt, temperature, top_k):
    expert, _ = tiny_pair
    ours = naive(expert, prompt, max_new_tokens=30, temperature=temperature, top_k=top_k, repetition_penalty=1.3,
                 generator=torch.Generator().manual_seed(3)).new_token_ids
    if temperature == 0:
        assert ours != naive(expert, prompt, max_new_tokens=30, temperature=0).new_token_ids  # it changes the text
        theirs = expert.generate(prompt, do_sample=False, max_new_tokens=30, eos_token_id=None, repetition_penalty=1.3)
        assert ours == theirs[0, prompt.shape[1]:].tolist()
    else:  # the same distribution step by step: transformers' processors on the same prefixes
        from transformers import RepetitionPenaltyLogitsProcessor, TemperatureLogitsWarper, TopKLogitsWarper

        ids = torch.cat([prompt, torch.tensor([ours])], dim=1)
        with torch.no_grad():
            logits = expert(ids).logits[0, prompt.shape[1] - 1:-1]
        for i, row in enumerate(logits):
            scores = row[None].clone()
            for proc in (RepetitionPenaltyLogitsProcessor(1.3), TemperatureLogitsWarper(temperature),
                         TopKLogitsWarper(top_k)):
                scores = proc(ids[:, :prompt.shape[1] + i], scores)
            theirs = torch.softmax(scores, -1)[0]
            mine = probabilities(penalize_repetition(row, ids[0, :prompt.shape[1] + i], 1.3), temperature, top_k)
            torch.testing.assert_close(mine, theirs, atol=1e-6, rtol=1e-5)
            assert not torch.allclose(mine, probabilities(row, temperature, top_k))  # and the distribution


def test_a_dynamic_draft_length_keeps_greedy_output_and_drafts_less(tiny_pair, prompt):
    expert, amateur = tiny_pair
    greedy = naive(expert, prompt, max_new_tokens=30, temperature=0).new_token_ids
    fixed = speculative(expert, amateur, prompt, max_new_tokens=30, gamma=4, temperature=0)
    never = speculative(expert, amateur, prompt, max_new_tokens=30, gamma=4, temperature=0, confidence_threshold=0.0)
    always = speculative(expert, amateur, prompt, max_new_tokens=30, gamma=4, temperature=0, confidence_threshold=1.0)
    assert fixed.new_token_ids == never.new_token_ids == always.new_token_ids == greedy
    assert never.trace == fixed.trace  # threshold 0: a constant γ
    # threshold 1: no token is that sure, one draft per round (none in a last round with one token of budget left)
    assert {len(it.draft) for it in always.trace[:-1]} == {1} and len(always.trace[-1].draft) <= 1


@pytest.mark.parametrize("threshold", [-0.1, 1.5, "0.4", True])
def test_a_bad_confidence_threshold_is_refused(tiny_pair, prompt, threshold):
    expert, amateur = tiny_pair
    with pytest.raises(ValueError, match=r"confidence_threshold must be in \[0, 1\] or None"):
        speculative(expert, amateur, prompt, max_new_tokens=5, confidence_threshold=threshold)


@pytest.mark.parametrize("gamma", [1, 4])
def test_greedy_speculative_equals_assisted_generate(tiny_pair, prompt, gamma):
    expert, amateur = tiny_pair
    ours = speculative(expert, amateur, prompt, max_new_tokens=30, gamma=gamma, temperature=0).new_token_ids
    with assistant_drafts(amateur, gamma), quiet_transformers():
        theirs = expert.generate(prompt, assistant_model=amateur, do_sample=False, max_new_tokens=30,
                                 eos_token_id=None)
    assert ours == theirs[0, prompt.shape[1]:].tolist()


@pytest.mark.pocket
def test_pocket_greedy_equals_generate(pocket):
    prompt = pocket.encode("A good recipe for Halloween is")
    ours = naive(pocket.expert, prompt, max_new_tokens=20, temperature=0).new_token_ids
    theirs = pocket.expert.generate(prompt, do_sample=False, max_new_tokens=20, eos_token_id=None)
    assert ours == theirs[0, prompt.shape[1]:].tolist()


# ------------------------------------------------------------------------------ stats and the trace
def test_speculative_stats_add_up(tiny_pair, prompt):
    expert, amateur = tiny_pair
    g = torch.Generator().manual_seed(0)
    result = speculative(expert, amateur, prompt, max_new_tokens=40, gamma=3, generator=g)
    stats = result.stats
    assert len(result.new_token_ids) == 40
    assert stats.accepted == sum(stats.accepted_per_iteration)
    assert stats.expert_calls == len(stats.accepted_per_iteration) == len(result.trace)
    assert stats.accepted_per_iteration == [it.n_accepted for it in result.trace]
    assert stats.proposed == sum(len(it.draft) for it in result.trace)
    assert 0 < stats.share_kept < 1 and 0 < stats.mean_beta < 1
    emitted = [t for it in result.trace for t in [*it.draft[:it.n_accepted], it.last_token]]
    assert emitted == result.new_token_ids
    for it in result.trace:
        assert it.last_kind == ("bonus" if it.n_accepted == len(it.draft) else "resampled")


def test_probabilities_filters():
    logits = torch.tensor([3.0, 2.0, 1.0, 0.0])
    assert probabilities(logits, 0).tolist() == [1, 0, 0, 0]
    assert torch.count_nonzero(probabilities(logits, 1.0, top_k=2)) == 2
    p = torch.softmax(logits, -1)
    nucleus = probabilities(logits, 1.0, top_p=float(p[0]) + 1e-3)  # needs the first two tokens
    assert torch.count_nonzero(nucleus) == 2 and nucleus.sum() == pytest.approx(1)
    assert torch.count_nonzero(probabilities(logits, 1.0, top_p=float(p[0]) - 1e-3)) == 1
    assert probabilities(logits, 2.0).tolist() == pytest.approx(torch.softmax(logits / 2, -1).tolist())


def test_top_k_keeps_ties_like_transformers():
    """Every token whose logit equals the k-th largest stays: top-2 of [3, 2, 2, 1] keeps three tokens, as
    transformers' TopKLogitsWarper does."""
    from transformers.generation.logits_process import TopKLogitsWarper

    logits = torch.tensor([3.0, 2.0, 2.0, 1.0])
    kept = probabilities(logits, 1.0, top_k=2) > 0
    assert kept.tolist() == [True, True, True, False]
    assert kept.tolist() == (TopKLogitsWarper(2)(None, logits[None])[0] > -math.inf).tolist()


# ----------------------------------------------------------------------------- EOS, bounds, seeds
def test_eos_stops_every_method(tiny_pair, prompt):
    expert, amateur = tiny_pair
    free = naive(expert, prompt, max_new_tokens=30, temperature=0).new_token_ids
    eos = free[5]  # pretend the 6th greedy token is EOS
    runs = {
        "naive": naive(expert, prompt, max_new_tokens=30, temperature=0, eos_token_id=eos),
        "speculative": speculative(expert, amateur, prompt, max_new_tokens=30, temperature=0, eos_token_id=eos),
        "self-draft": speculative(expert, expert, prompt, max_new_tokens=30, gamma=8, temperature=0,
                                  eos_token_id=[eos]),  # EOS inside an accepted draft run
        "contrastive": contrastive(expert, amateur, prompt, max_new_tokens=30, alpha=1.0, eos_token_id=eos),
        "prompt-lookup": prompt_lookup(expert, prompt, max_new_tokens=30, temperature=0, eos_token_id=eos),
        "contrastive-search": contrastive_search(expert, prompt, max_new_tokens=30, penalty_alpha=0,
                                                 eos_token_id=eos),
        "dola": dola(expert, prompt, max_new_tokens=30, alpha=1.0, eos_token_id=eos),
    }
    for name, run in runs.items():
        assert run.new_token_ids == free[:free.index(eos) + 1], name


def test_eos_inside_an_accepted_prompt_lookup_draft_stops_it(tiny_pair):
    """The prompt holds the greedy continuation 7 6 1 9 3: the first round drafts all of it and accepts it, and
    EOS = 6 ends the round after two tokens, without a bonus token."""
    expert, _ = tiny_pair
    prompt = torch.tensor([[1, 2, 3, 7, 6, 1, 9, 3]])
    free = prompt_lookup(expert, prompt, max_new_tokens=12, temperature=0)
    assert free.new_token_ids[:5] == [7, 6, 1, 9, 3] and free.trace[0].n_accepted == 5
    stopped = prompt_lookup(expert, prompt, max_new_tokens=12, temperature=0, eos_token_id=6)
    assert stopped.new_token_ids == [7, 6]
    assert stopped.stats.expert_calls == 1 and stopped.trace[0].last_kind == "none"


@pytest.mark.parametrize("method", ["speculative", "prompt_lookup"])
def test_eos_stops_sampling(tiny_pair, prompt, method):
    expert, amateur = tiny_pair
    run = {"speculative": lambda g: speculative(expert, amateur, prompt, max_new_tokens=30, eos_token_id=EOS,
                                                generator=g),
           "prompt_lookup": lambda g: prompt_lookup(expert, torch.tensor([[7, EOS, 4, 7]]), max_new_tokens=30,
                                                    gamma=5, eos_token_id=EOS, generator=g)}[method]
    # The prompt lookup's prompt holds EOS: for some seeds it is drafted, accepted, and ends the output.
    for seed in range(30):
        out = run(torch.Generator().manual_seed(seed)).new_token_ids
        assert EOS not in out[:-1]
        assert out[-1] == EOS or len(out) == 30


@pytest.mark.parametrize("max_new_tokens", [0, 1, 2, 5, 13])
def test_max_new_tokens_is_exact(tiny_pair, prompt, max_new_tokens):
    expert, amateur = tiny_pair
    g = torch.Generator().manual_seed(1)
    for run in (naive(expert, prompt, max_new_tokens=max_new_tokens, generator=g),
                contrastive(expert, amateur, prompt, max_new_tokens=max_new_tokens),
                speculative(expert, amateur, prompt, max_new_tokens=max_new_tokens, gamma=4, generator=g),
                speculative(expert, expert, prompt, max_new_tokens=max_new_tokens, gamma=8, generator=g),
                prompt_lookup(expert, prompt, max_new_tokens=max_new_tokens, gamma=10, temperature=0),
                prompt_lookup(expert, LOOKUP_PROMPT, max_new_tokens=max_new_tokens, gamma=3, generator=g),
                contrastive_search(expert, prompt, max_new_tokens=max_new_tokens),
                dola(expert, prompt, max_new_tokens=max_new_tokens)):
        assert len(run.new_token_ids) == max_new_tokens
    assert naive(expert, prompt, max_new_tokens=0).new_token_ids == []


def test_seeded_runs_reproduce(tiny_pair, prompt):
    expert, amateur = tiny_pair

    def run(seed):
        g = torch.Generator().manual_seed(seed)
        return (naive(expert, prompt, max_new_tokens=20, top_p=0.9, generator=g).new_token_ids,
                speculative(expert, amateur, prompt, max_new_tokens=20, top_k=5, generator=g).new_token_ids)

    assert run(7) == run(7)
    assert run(7) != run(8)


# ---------------------------------------------------------------------------------------- bad input
BAD_INPUTS = [
    ({"input_ids": [[1, 2]]}, TypeError, "torch.Tensor"),
    ({"input_ids": torch.tensor([[1.0, 2.0]])}, TypeError, "long"),
    ({"input_ids": torch.tensor([1, 2])}, ValueError, "shape"),
    ({"input_ids": torch.tensor([[1, 2], [3, 4]])}, ValueError, "batch size"),
    ({"input_ids": torch.zeros(1, 0, dtype=torch.long)}, ValueError, "empty"),
    ({"input_ids": torch.ones(1, 60, dtype=torch.long)}, ValueError, "context"),
    ({"max_new_tokens": -1}, ValueError, "max_new_tokens"),
    ({"max_new_tokens": 2.5}, ValueError, "max_new_tokens"),
    ({"temperature": -0.5}, ValueError, "temperature"),
    ({"top_p": 0.0}, ValueError, "top_p"),
    ({"top_p": 1.5}, ValueError, "top_p"),
    ({"top_k": 0}, ValueError, "top_k"),
    ({"gamma": 0}, ValueError, "gamma"),
    ({"input_ids": torch.tensor([[1, 2, VOCAB]])}, ValueError,
     rf"input_ids must lie in 0\.\.{VOCAB - 1} \(the model's vocabulary has {VOCAB} tokens\); got max {VOCAB}: "
     "encode the text with the pair's tokenizer"),
    ({"input_ids": torch.tensor([[1, -1, 2]])}, ValueError, "must lie in 0.*got min -1"),
    ({"generator": 0}, TypeError, r"generator must be a torch\.Generator or None, got int: pass torch\.Generator"),
    ({"generator": "seed"}, TypeError, "generator must be a torch.Generator"),
]


@pytest.mark.parametrize(("change", "error", "message"), BAD_INPUTS)
def test_bad_input_is_refused_with_a_clear_message(tiny_pair, prompt, change, error, message):
    expert, amateur = tiny_pair
    kwargs = {"input_ids": prompt, "max_new_tokens": 5, **change}
    with pytest.raises(error, match=message):
        speculative(expert, amateur, **kwargs)
    with pytest.raises(error, match=message):
        prompt_lookup(expert, **kwargs)
    if "gamma" not in change:
        with pytest.raises(error, match=message):
            naive(expert, **kwargs)
    if not {"gamma", "temperature", "top_p", "top_k", "generator"} & set(change):
        with pytest.raises(error, match=message):
            contrastive(expert, amateur, **kwargs)
        for single_model_method in (contrastive_search, dola):
            with pytest.raises(error, match=message):
                single_model_method(expert, **kwargs)


@pytest.mark.parametrize(("change", "message"), [
    ({"alpha": 0.0}, "alpha"), ({"alpha": 1.5}, "alpha"), ({"amateur_temperature": 0}, "amateur_temperature"),
    ({"max_new_tokens": -3}, "max_new_tokens"),
])
def test_contrastive_refuses_bad_knobs(tiny_pair, prompt, change, message):
    expert, amateur = tiny_pair
    with pytest.raises(ValueError, match=message):
        contrastive(expert, amateur, prompt, **{"max_new_tokens": 5, **change})


@pytest.mark.parametrize(("method", "change", "message"), [
    (prompt_lookup, {"max_ngram": 0}, "max_ngram .* int >= 1"),
    (prompt_lookup, {"max_ngram": 2.0}, "max_ngram"),
    (prompt_lookup, {"gamma": True}, "gamma"),
    (contrastive_search, {"penalty_alpha": -0.1}, r"penalty_alpha must be in \[0, 1\]"),
    (contrastive_search, {"penalty_alpha": 1.5}, "penalty_alpha"),
    (contrastive_search, {"penalty_alpha": None}, "penalty_alpha"),
    (contrastive_search, {"top_k": 0}, "top_k .* int >= 1"),
    (contrastive_search, {"top_k": None}, "top_k"),
    (contrastive_search, {"top_k": 2.5}, "top_k"),
    (dola, {"alpha": 0.0}, "alpha"),
    (dola, {"alpha": 2.0}, "alpha"),
    (dola, {"premature_layers": []}, "non-empty list"),
    (dola, {"premature_layers": "low"}, "non-empty list"),
    (dola, {"premature_layers": 1}, "non-empty list"),
    (dola, {"premature_layers": [0, 2]}, r"\[2\] are not layers of this 2-layer model.*0\.\.1"),
    (dola, {"premature_layers": [-1]}, "not layers"),
    (dola, {"premature_layers": [0.5]}, "not layers"),
    (dola, {"repetition_penalty": 0}, "repetition_penalty must be > 0"),
    (dola, {"repetition_penalty": "1.2"}, "repetition_penalty"),
    (naive, {"repetition_penalty": 0}, "repetition_penalty must be > 0"),
    (naive, {"repetition_penalty": -1.2}, "repetition_penalty must be > 0"),
])
def test_single_model_methods_refuse_bad_knobs(tiny_pair, prompt, method, change, message):
    expert, _ = tiny_pair
    with pytest.raises(ValueError, match=message):
        method(expert, prompt, **{"max_new_tokens": 5, **change})


def test_dola_refuses_models_without_a_final_norm(prompt):
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=16, n_layer=2, n_head=2)).eval()
    with pytest.raises(ValueError, match=r"Llama-style model \(model.model.norm, model.lm_head\); GPT2LMHeadModel"):
        dola(gpt2, prompt, max_new_tokens=3)


@pytest.mark.parametrize("layer", ["sliding", "linear"])
def test_models_whose_cache_cannot_be_rolled_back_are_refused_by_speculative_decoding(tiny_pair, prompt, layer):
    """Point 20: transformers' DynamicCache.crop raises for a sliding-window layer once its window is full and for a
    linear-attention layer: speculative decoding and prompt lookup refuse such a model up front, by name. Decoders
    that never roll back still take it."""
    from transformers import Lfm2Config, Lfm2ForCausalLM, MistralConfig, MistralForCausalLM

    shape = {"vocab_size": VOCAB, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2,
             "num_attention_heads": 2, "num_key_value_heads": 2, "max_position_embeddings": 64}
    model, name, cache_layer = {
        "sliding": (MistralForCausalLM(MistralConfig(**shape, sliding_window=4)).eval(), "MistralForCausalLM",
                    "DynamicSlidingWindowLayer"),
        "linear": (Lfm2ForCausalLM(Lfm2Config(**shape, layer_types=["conv", "full_attention"])).eval(),
                   "Lfm2ForCausalLM", "LinearAttentionLayer"),
    }[layer]
    expert, _ = tiny_pair
    message = (rf"{name} has sliding-window or linear-attention cache layers \({cache_layer}\) .* speculative "
               r"decoding with this model's cache is not supported here; use transformers' "
               r"model\.generate\(assistant_model=\.\.\.\)")
    long_prompt = torch.tensor([[1, 2, 3, 4, 5, 1, 2]])  # longer than the sliding window: crop would raise
    with pytest.raises(ValueError, match=message):
        speculative(expert, model, long_prompt, max_new_tokens=5)
    with pytest.raises(ValueError, match=message):
        speculative(model, expert, long_prompt, max_new_tokens=5)
    with pytest.raises(ValueError, match=message):
        prompt_lookup(model, long_prompt, max_new_tokens=5)
    assert len(naive(model, long_prompt, max_new_tokens=3).new_token_ids) == 3


def test_pairs_with_different_vocabularies_are_refused(tiny_pair, prompt):
    expert, _ = tiny_pair
    other = tiny_llama(3, vocab=VOCAB + 4)
    with pytest.raises(ValueError, match="vocabulary sizes"):
        speculative(expert, other, prompt, max_new_tokens=3)
    with pytest.raises(ValueError, match="vocabulary sizes"):
        contrastive(expert, other, prompt, max_new_tokens=3)


def test_models_on_different_devices_are_refused(tiny_pair, prompt, monkeypatch):
    expert, amateur = tiny_pair
    real = core._device
    monkeypatch.setattr(core, "_device", lambda m: torch.device("meta") if m is amateur else real(m))
    with pytest.raises(ValueError, match="different devices"):
        speculative(expert, amateur, prompt, max_new_tokens=3)
