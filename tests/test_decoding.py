"""helpers.decoding: exactness (statistically), greedy equality, cache correctness, agreement with transformers,
and every refused input. Tiny random models keep this fast; the pocket pair is used where real text matters."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import EOS, VOCAB, tiny_llama

from helpers import decoding
from helpers.bench import assistant_drafts, quiet_transformers
from helpers.decoding import contrastive, naive, probabilities, speculative
from helpers.stats import exact_first_two, first_two_counts, goodness_of_fit

N_RUNS = 20_000


# ------------------------------------------------------------------------------------------ exactness
@pytest.mark.parametrize(("warp", "gamma", "max_new_tokens"), [
    ({"temperature": 1.0}, 2, 3),                # two drafts judged in one expert pass
    ({"temperature": 0.7}, 1, 2),                # the bonus token is the second token
    ({"temperature": 1.0, "top_k": 4}, 2, 3),    # tokens outside the top-k never appear
])
def test_speculative_matches_expert_distribution(tiny_pair, prompt, one_thread, warp, gamma, max_new_tokens):
    expert, amateur = tiny_pair
    exact = exact_first_two(expert, prompt, **warp)
    counts = first_two_counts(lambda g: speculative(
        expert, amateur, prompt, max_new_tokens=max_new_tokens, gamma=gamma, generator=g, **warp).new_token_ids,
        VOCAB, N_RUNS)
    fit = goodness_of_fit(counts, exact)
    assert fit.impossible == 0, "speculative emitted a token pair the expert gives probability 0"
    assert fit.p_value > 1e-3, fit
    assert fit.tv <= fit.tv_noise, fit


def test_the_source_articles_sampler_fails_the_same_test(tiny_pair, prompt, one_thread):
    """The negative control: the same test run on the article's loop detects its bias."""
    from helpers.seed_reference import speculative_decoding

    expert, amateur = tiny_pair
    exact = exact_first_two(expert, prompt)
    counts = first_two_counts(lambda g: speculative_decoding(
        expert, amateur, prompt, n_tokens=2, max_length=prompt.shape[1] + 4, generator=g),  # +4: >= 2 tokens
        VOCAB, N_RUNS)
    fit = goodness_of_fit(counts, exact)
    assert fit.p_value < 1e-3 and fit.tv > fit.tv_noise, fit


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
    assert result.stats.acceptance_rate == 1.0
    assert result.stats.mean_beta == pytest.approx(1.0)
    assert result.stats.expert_calls == 4  # 5 tokens per call: 4 drafts + the bonus token


@pytest.mark.pocket
@pytest.mark.parametrize("gamma", [1, 3, 5, 8])
def test_greedy_speculative_equals_greedy_expert_on_the_pocket_pair(pocket, gamma):
    prompt = pocket.encode("Stanford is known for")
    reference = naive(pocket.expert, prompt, max_new_tokens=24, temperature=0).new_token_ids
    result = speculative(pocket.expert, pocket.amateur, prompt, max_new_tokens=24, gamma=gamma, temperature=0)
    assert result.new_token_ids == reference


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


# ------------------------------------------------------------------------------ against transformers
def test_naive_greedy_equals_generate(tiny_pair, prompt):
    expert, _ = tiny_pair
    ours = naive(expert, prompt, max_new_tokens=30, temperature=0).new_token_ids
    theirs = expert.generate(prompt, do_sample=False, max_new_tokens=30, eos_token_id=None)
    assert ours == theirs[0, prompt.shape[1]:].tolist()


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
    assert 0 < stats.acceptance_rate < 1 and 0 < stats.mean_beta < 1
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
    }
    for name, run in runs.items():
        assert run.new_token_ids == free[:free.index(eos) + 1], name


def test_eos_stops_sampling(tiny_pair, prompt):
    expert, amateur = tiny_pair
    for seed in range(30):
        out = speculative(expert, amateur, prompt, max_new_tokens=30, eos_token_id=EOS,
                          generator=torch.Generator().manual_seed(seed)).new_token_ids
        assert EOS not in out[:-1]
        assert out[-1] == EOS or len(out) == 30


@pytest.mark.parametrize("max_new_tokens", [0, 1, 2, 5, 13])
def test_max_new_tokens_is_exact(tiny_pair, prompt, max_new_tokens):
    expert, amateur = tiny_pair
    g = torch.Generator().manual_seed(1)
    for run in (naive(expert, prompt, max_new_tokens=max_new_tokens, generator=g),
                contrastive(expert, amateur, prompt, max_new_tokens=max_new_tokens),
                speculative(expert, amateur, prompt, max_new_tokens=max_new_tokens, gamma=4, generator=g),
                speculative(expert, expert, prompt, max_new_tokens=max_new_tokens, gamma=8, generator=g)):
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
]


@pytest.mark.parametrize(("change", "error", "message"), BAD_INPUTS)
def test_bad_input_is_refused_with_a_clear_message(tiny_pair, prompt, change, error, message):
    expert, amateur = tiny_pair
    kwargs = {"input_ids": prompt, "max_new_tokens": 5, **change}
    with pytest.raises(error, match=message):
        speculative(expert, amateur, **kwargs)
    if "gamma" not in change:
        with pytest.raises(error, match=message):
            naive(expert, **kwargs)


@pytest.mark.parametrize(("change", "message"), [
    ({"alpha": 0.0}, "alpha"), ({"alpha": 1.5}, "alpha"), ({"amateur_temperature": 0}, "amateur_temperature"),
    ({"max_new_tokens": -3}, "max_new_tokens"),
])
def test_contrastive_refuses_bad_knobs(tiny_pair, prompt, change, message):
    expert, amateur = tiny_pair
    with pytest.raises(ValueError, match=message):
        contrastive(expert, amateur, prompt, **{"max_new_tokens": 5, **change})


def test_pairs_with_different_vocabularies_are_refused(tiny_pair, prompt):
    expert, _ = tiny_pair
    other = tiny_llama(3, vocab=VOCAB + 4)
    with pytest.raises(ValueError, match="vocabulary sizes"):
        speculative(expert, other, prompt, max_new_tokens=3)
    with pytest.raises(ValueError, match="vocabulary sizes"):
        contrastive(expert, other, prompt, max_new_tokens=3)


def test_models_on_different_devices_are_refused(tiny_pair, prompt, monkeypatch):
    expert, amateur = tiny_pair
    real = decoding._device
    monkeypatch.setattr(decoding, "_device", lambda m: torch.device("meta") if m is amateur else real(m))
    with pytest.raises(ValueError, match="different devices"):
        speculative(expert, amateur, prompt, max_new_tokens=3)
