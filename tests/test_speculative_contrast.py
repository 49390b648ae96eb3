"""helpers.decoding.speculative_contrast (notebook 08): the contrastive target, its exactness (one round enumerated in
float64, and the real sampler's first two tokens), greedy identity, the limit cases, and bad input."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import VOCAB, random_head
from test_decoding import BAD_INPUTS, BIASED, EXACT_TOLERANCE, T1, TOP3, assert_exact, exact_id

from helpers.data import EVAL_PROMPTS, read_prompts
from helpers.decoding import (
    ContrastiveModel,
    contrastive,
    contrastive_logits,
    contrastive_sample,
    contrastive_scores,
    probabilities,
    speculative,
    speculative_contrastive,
)
from helpers.decoding import speculative_contrast as module
from helpers.heads import load_head
from helpers.stats import exact_distribution, exact_first_two, exact_sequences, first_two_counts, round_error

KNOBS = {"beta": 0.5, "alpha": 0.1}
"""O'Brien & Lewis's setting."""


def test_the_target_is_the_logit_form_with_the_plausibility_mask():
    """s_cd = (1 + β) log p_exp − β log p_ama on V_head: the same p_cd as O'Brien & Lewis's raw-logit form (the
    log-softmax shifts every logit of a position by one constant); β = 0 is the expert on V_head; β = ∞ is Li et
    al.'s score of notebook 02."""
    g = torch.Generator().manual_seed(0)
    expert_logits, amateur_logits = torch.randn(3, 50, generator=g) * 3, torch.randn(3, 50, generator=g) * 3
    s_cd = contrastive_logits(expert_logits, amateur_logits, beta=0.5, alpha=0.1)
    mask = expert_logits >= math.log(0.1) + expert_logits.max(-1, keepdim=True).values
    raw = (1.5 * expert_logits - 0.5 * amateur_logits).masked_fill(~mask, -math.inf)
    assert torch.equal(torch.isfinite(s_cd), mask)
    assert torch.allclose(torch.softmax(s_cd, -1), torch.softmax(raw, -1), atol=1e-6)
    expert_only = contrastive_logits(expert_logits, amateur_logits, beta=0, alpha=0.1)
    assert torch.allclose(torch.softmax(expert_only, -1),
                          torch.softmax(expert_logits.masked_fill(~mask, -math.inf), -1), atol=1e-6)
    li = contrastive_logits(expert_logits, amateur_logits, beta=math.inf, alpha=0.1)
    assert torch.equal(li, contrastive_scores(expert_logits, amateur_logits, 0.1).scores)


def test_a_larger_beta_moves_the_argmax_towards_li_et_al(tiny_pair, prompt):
    """The greedy choice of s_cd equals Li et al.'s (notebook 02) once β is large enough, at every position of a
    run; at β = 0 it is the expert's own argmax."""
    expert, amateur = tiny_pair
    with torch.no_grad():
        e, a = expert(prompt).logits[0], amateur(prompt).logits[0]
    li = contrastive_logits(e, a, beta=math.inf).argmax(-1)
    assert torch.equal(contrastive_logits(e, a, beta=1e6).argmax(-1), li)
    assert torch.equal(contrastive_logits(e, a, beta=0).argmax(-1), e.argmax(-1))


# ------------------------------------------------------------------------------------------ exactness
def first_round(decode, gamma):
    return exact_distribution(lambda: tuple(decode().trace[0].emitted), branching_draws=gamma + 1)


def test_the_reference_samples_p_cd(exact_pair, prompt, one_thread):
    """contrastive_sample, every path of its first two draws enumerated, is the exact p_cd of two tokens."""
    expert, amateur = exact_pair
    outputs = exact_distribution(lambda: tuple(contrastive_sample(expert, amateur, prompt, max_new_tokens=2,
                                                                  **KNOBS, **TOP3).new_token_ids))
    exact = exact_sequences(ContrastiveModel(expert, amateur, **KNOBS), prompt, 2, **TOP3)
    enumerated = torch.zeros_like(exact)
    for (x1, x2), p in outputs.items():
        enumerated[x1, x2] = p
    assert (enumerated - exact).abs().sum() < EXACT_TOLERANCE


@pytest.mark.parametrize(("warp", "gamma", "knobs"), [
    (T1, 1, KNOBS),                                          # the bonus token is the 2nd token
    (T1, 2, {"beta": 1.0, "alpha": 0.05}),
    (TOP3, 2, KNOBS),                                        # top-k over s_cd
    (TOP3, 3, {"beta": 2.0, "alpha": 0.2, "amateur_temperature": 0.5}),
    ({"temperature": 1.0, "top_p": 0.8}, 2, KNOBS),          # nucleus
    (T1, 2, {"beta": math.inf, "alpha": 0.1}),               # sampling Li et al.'s score
], ids=lambda v: "-".join(f"{k}{x}" for k, x in v.items()) if isinstance(v, dict) and "beta" in v else exact_id(v))
def test_one_round_is_exact(exact_pair, prompt, one_thread, warp, gamma, knobs):
    """Every path through one round (drafts, acceptance draws, resampled or bonus token) enumerated in float64: the
    round, continued by p_cd, gives p_cd's distribution of γ + 1 tokens to 1e-6; both endings occur."""
    expert, amateur = exact_pair
    outputs = first_round(lambda: speculative_contrastive(expert, amateur, prompt, max_new_tokens=gamma + 1,
                                                          gamma=gamma, **knobs, **warp), gamma)
    assert sum(p for y, p in outputs.items() if len(y) == gamma + 1) > 0.01
    assert sum(p for y, p in outputs.items() if len(y) <= gamma) > 0.01
    assert round_error(outputs, ContrastiveModel(expert, amateur, **knobs), prompt, gamma + 1, **warp) \
        < EXACT_TOLERANCE


@pytest.mark.parametrize(("warp", "gamma"), [(T1, 1), (TOP3, 2)], ids=exact_id)
def test_a_draft_head_with_the_amateurs_contrast_is_exact(exact_pair, prompt, one_thread, warp, gamma):
    """The head drafts, the amateur supplies the contrast: two rounds (the first drafts nothing) enumerated."""
    expert, amateur = exact_pair
    head = random_head(expert, [0, 2, 3, 5], scale=2.0).double()

    def two_rounds():
        run = speculative_contrastive(expert, amateur, prompt, max_new_tokens=gamma + 2, gamma=gamma, head=head,
                                      **KNOBS, **warp)
        return tuple(run.trace[0].emitted + run.trace[1].emitted)

    outputs = exact_distribution(two_rounds, branching_draws=gamma + 2)
    assert round_error(outputs, ContrastiveModel(expert, amateur, **KNOBS), prompt, gamma + 2, **warp) \
        < EXACT_TOLERANCE


@pytest.mark.parametrize(("warp", "gamma"), [(T1, 2), (TOP3, 2)], ids=exact_id)
def test_judging_with_the_experts_p_fails_the_exact_check(exact_pair, prompt, one_thread, warp, gamma):
    """Negative control (a): the same drafts judged with the expert's p (plain speculative sampling) give p, not
    p_cd."""
    expert, amateur = exact_pair
    outputs = first_round(lambda: speculative(expert, amateur, prompt, max_new_tokens=gamma + 1, gamma=gamma,
                                              **warp), gamma)
    assert round_error(outputs, ContrastiveModel(expert, amateur, **KNOBS), prompt, gamma + 1, **warp) > BIASED


@pytest.mark.parametrize(("warp", "gamma"), [(T1, 2), (TOP3, 2)], ids=exact_id)
def test_the_contrast_from_the_wrong_position_fails_the_exact_check(exact_pair, prompt, one_thread, monkeypatch,
                                                                     warp, gamma):
    """Negative control (b): the amateur's logits one position late (each judged position contrasted with the
    amateur's row of the next one, the last row repeated), the off-by-one the source article's sampler has."""
    expert, amateur = exact_pair
    real = module.contrastive_logits
    with monkeypatch.context() as patch:
        patch.setattr(module, "contrastive_logits", lambda e, a, **kw: real(e, torch.cat([a[1:], a[-1:]]), **kw))
        outputs = first_round(lambda: speculative_contrastive(expert, amateur, prompt, max_new_tokens=gamma + 1,
                                                              gamma=gamma, **KNOBS, **warp), gamma)
    assert round_error(outputs, ContrastiveModel(expert, amateur, **KNOBS), prompt, gamma + 1, **warp) > BIASED


SCD_RUNS = 20_000
"""The real-sampler check of SCD runs 20,000 seeded runs (81 s in one run on a 2-core AMD EPYC), where the other
decoders' run :data:`test_decoding.N_RUNS` (3,000): its TV noise bound shrinks as 1/√n, to about 0.4 of 3,000 runs'
bound."""


def test_the_real_sampler_matches_p_cd(tiny_pair, prompt, one_thread):
    """The real draws (not scripted ones) give p_cd's distribution of the first two tokens (γ = 1: the second token
    is a bonus token or comes from a second round; top-k 4 over s_cd). Longer drafts are left to the enumeration
    above, which runs the same code with scripted draws."""
    expert, amateur = tiny_pair
    warp = {"temperature": 1.0, "top_k": 4}
    exact = exact_first_two(ContrastiveModel(expert, amateur, **KNOBS), prompt, **warp)
    counts = first_two_counts(lambda g: speculative_contrastive(
        expert, amateur, prompt, max_new_tokens=2, gamma=1, generator=g, **KNOBS, **warp).new_token_ids,
        VOCAB, SCD_RUNS)
    assert_exact(counts, exact)


def test_the_target_differs_from_the_expert_enough_for_the_controls(tiny_pair, prompt):
    expert, amateur = tiny_pair
    with torch.no_grad():
        p = probabilities(expert(prompt).logits[0, -1])
        p_cd = probabilities(ContrastiveModel(expert, amateur, **KNOBS)(prompt).logits[0, -1])
    assert 0.1 < 0.5 * float((p - p_cd).abs().sum()) < 0.9


# ----------------------------------------------------------------------------------- greedy equality
@pytest.mark.parametrize("gamma", range(1, 9))
def test_greedy_equals_greedy_contrastive_decoding(tiny_pair, prompt, gamma):
    expert, amateur = tiny_pair
    reference = contrastive_sample(expert, amateur, prompt, max_new_tokens=30, temperature=0, **KNOBS)
    result = speculative_contrastive(expert, amateur, prompt, max_new_tokens=30, gamma=gamma, temperature=0,
                                     **KNOBS)
    assert result.new_token_ids == reference.new_token_ids
    assert result.stats.expert_calls <= 30


def test_beta_infinity_is_notebook_02s_contrastive_decoding(tiny_pair, prompt):
    expert, amateur = tiny_pair
    li = contrastive(expert, amateur, prompt, max_new_tokens=30, alpha=0.1).new_token_ids
    limit = {"beta": math.inf, "alpha": 0.1, "temperature": 0}
    assert contrastive_sample(expert, amateur, prompt, max_new_tokens=30, **limit).new_token_ids == li
    assert speculative_contrastive(expert, amateur, prompt, max_new_tokens=30, gamma=3, **limit).new_token_ids == li


@pytest.mark.parametrize("layers", [(-1,), (0, 1, -1)], ids=["f", "fused"])
def test_greedy_with_a_draft_head_equals_greedy_contrastive_decoding(tiny_pair, prompt, layers):
    expert, amateur = tiny_pair
    head = random_head(expert, [0, 2, 3, 5, 7, 9, 10, 11], seed=4, scale=1.5, feature_layers=layers)
    reference = contrastive_sample(expert, amateur, prompt, max_new_tokens=20, temperature=0, **KNOBS)
    result = speculative_contrastive(expert, amateur, prompt, max_new_tokens=20, gamma=3, temperature=0, head=head,
                                     **KNOBS)
    assert result.new_token_ids == reference.new_token_ids
    assert result.stats.head_calls > 0 and result.stats.amateur_calls == result.stats.expert_calls


@pytest.mark.pocket
def test_greedy_equals_greedy_contrastive_decoding_on_the_pocket_pair(pocket):
    """fp32, γ = 1..8, and Li et al.'s limit against notebook 02's decoder."""
    ids = pocket.encode("The history of the printing press begins")
    reference = contrastive_sample(pocket.expert, pocket.amateur, ids, max_new_tokens=12, temperature=0, **KNOBS)
    for gamma in range(1, 9):
        result = speculative_contrastive(pocket.expert, pocket.amateur, ids, max_new_tokens=12, gamma=gamma,
                                         temperature=0, **KNOBS)
        assert result.new_token_ids == reference.new_token_ids, gamma
    li = contrastive(pocket.expert, pocket.amateur, ids, max_new_tokens=12).new_token_ids
    assert speculative_contrastive(pocket.expert, pocket.amateur, ids, max_new_tokens=12, gamma=4, temperature=0,
                                   beta=math.inf).new_token_ids == li


@pytest.mark.pocket
@pytest.mark.parametrize("request_index", [0, 2, 4])
def test_greedy_scd_equals_greedy_cd_on_held_out_chat_requests(pocket, request_index):
    """Notebook 08's setting: chat template, EOS on, the amateur and the committed head drafting at the γ its
    benchmark selected (1 and 3), on three of the timed requests (0-based indices 0, 2, 4 of eval_prompts.txt)."""
    ids = pocket.encode_chat(read_prompts(EVAL_PROMPTS)[request_index])
    eos = {"eos_token_id": pocket.eos_token_id}
    reference = contrastive_sample(pocket.expert, pocket.amateur, ids, max_new_tokens=16, temperature=0, **eos,
                                   **KNOBS).new_token_ids
    head = load_head(pocket.expert)
    for gamma, drafter in ((1, None), (3, head)):
        result = speculative_contrastive(pocket.expert, pocket.amateur, ids, max_new_tokens=16, gamma=gamma,
                                         temperature=0, head=drafter, **eos, **KNOBS)
        assert result.new_token_ids == reference, (gamma, drafter is not None)


# ---------------------------------------------------------------------------------------- stats, bad input
def test_stats_count_every_pass(tiny_pair, prompt):
    """Amateur passes: one per drafted token plus one per round (the bonus position); α under p_cd recorded."""
    expert, amateur = tiny_pair
    run = speculative_contrastive(expert, amateur, prompt, max_new_tokens=20, gamma=3,
                                  generator=torch.Generator().manual_seed(0), **KNOBS)
    rounds = len(run.trace)
    assert run.stats.expert_calls == rounds
    assert run.stats.amateur_calls == run.stats.proposed + rounds
    assert len(run.stats.betas) == sum(it.n_accepted + (it.last_kind == "resampled") for it in run.trace)
    assert 0 < run.stats.mean_beta < 1


@pytest.mark.parametrize(("change", "error", "message"), BAD_INPUTS)
def test_bad_input_is_refused_with_a_clear_message(tiny_pair, prompt, change, error, message):
    expert, amateur = tiny_pair
    kwargs = {"input_ids": prompt, "max_new_tokens": 5, **change}
    with pytest.raises(error, match=message):
        speculative_contrastive(expert, amateur, **kwargs)
    if "gamma" not in change:
        with pytest.raises(error, match=message):
            contrastive_sample(expert, amateur, **kwargs)


@pytest.mark.parametrize(("change", "message"), [
    ({"beta": -0.5}, r"beta \(β_CD, the contrast strength\) must be a number >= 0"), ({"beta": "0.5"}, "beta"),
    ({"beta": True}, "beta"),
    ({"alpha": 0.0}, "alpha"), ({"amateur_temperature": 0}, "amateur_temperature"),
])
def test_bad_knobs_are_refused(tiny_pair, prompt, change, message):
    expert, amateur = tiny_pair
    for method in (speculative_contrastive, contrastive_sample):
        with pytest.raises(ValueError, match=message):
            method(expert, amateur, prompt, max_new_tokens=5, **change)


def test_a_head_of_another_expert_is_refused(tiny_pair, prompt):
    expert, amateur = tiny_pair
    with pytest.raises(ValueError, match="not attached to this expert"):
        speculative_contrastive(expert, amateur, prompt, max_new_tokens=5, head=random_head(amateur))
