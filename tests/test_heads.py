"""The draft head (helpers.heads): exact output, a KV cache kept in step with the expert, saving and loading."""

from __future__ import annotations

import pytest
import torch
from conftest import EXACT_VOCAB, random_head, tiny_llama

from helpers.decoding import naive
from helpers.decoding.core import CachedModel, expert_features
from helpers.heads import DraftHead, HeadStep, head_config, head_speculative, load_head
from helpers.stats import exact_distribution, round_error

FUSED = (0, 1, -1)
"""A fused head's layers on the 2-layer expert: the embedding output, the first layer's output and f."""
KINDS = pytest.mark.parametrize("layers", [(-1,), FUSED], ids=["f", "fused"])


@pytest.fixture(scope="module")
def expert():
    return tiny_llama(0, layers=2)


@KINDS
def test_the_expert_keeps_its_features_through_a_rollback(expert, prompt, layers):
    lm = CachedModel(expert, prompt, keep_features=True, feature_layers=layers)
    lm.logits()
    lm.append([4, 5, 6])
    lm.logits(keep=3)
    lm.rollback(2)
    lm.append([7])
    lm.logits()
    with torch.no_grad():
        full = expert_features(expert(lm.tokens, output_hidden_states=True).hidden_states, layers)[0]
    assert lm.features.shape == (lm.tokens.shape[1], len(layers) * expert.config.hidden_size) == full.shape
    torch.testing.assert_close(lm.features, full, atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="keep_features needs use_cache=True"):
        CachedModel(expert, prompt, use_cache=False, keep_features=True)


@KINDS
@pytest.mark.parametrize("vocab", [None, [0, 2, 3, 5, 7, 11]], ids=["full", "trimmed"])
@pytest.mark.parametrize("gamma", [1, 3])
def test_greedy_with_a_head_is_greedy_decoding(expert, prompt, vocab, gamma, layers):
    head = random_head(expert, vocab, feature_layers=layers)
    ours = head_speculative(expert, head, prompt, max_new_tokens=25, gamma=gamma, temperature=0)
    assert ours.new_token_ids == naive(expert, prompt, max_new_tokens=25, temperature=0).new_token_ids
    assert ours.trace[0].draft == []  # the first round reads the prompt: no features yet, so no draft
    drafted = {t for it in ours.trace for t in it.draft}
    assert drafted and (vocab is None or drafted <= set(vocab))
    assert ours.stats.amateur_calls >= sum(len(it.draft) > 0 for it in ours.trace)


def from_scratch_drafts(expert, head, prompt, trace):
    """What the head drafts in every round when it recomputes everything from the expert's true features of the
    verified sequence, without a cache: the reference for the cached :class:`HeadDrafter` (a fused head's true
    features are read, g_t, before its own predictions join them)."""
    tokens = prompt[0].tolist()
    drafts = []
    for it in trace:
        if it.draft:
            ids = torch.tensor([tokens])
            with torch.no_grad():
                hidden = expert(ids, output_hidden_states=True).hidden_states
                features = head.read(expert_features(hidden, head.feature_layers)[0, :-1])  # f_0 .. f_{L-2}
                next_tokens, draft = ids[0, 1:], []
                for _ in it.draft:
                    predicted = head(features[None], next_tokens[None])[0, -1]  # the whole sequence, no cache
                    draft.append(int(head.vocab[head.logits(predicted).argmax()]))
                    features = torch.cat([features, predicted[None]])
                    next_tokens = torch.cat([next_tokens, torch.tensor(draft[-1:])])
            drafts.append(draft)
        tokens += it.emitted
    return drafts


@KINDS
def test_the_heads_cache_stays_in_step_with_the_expert(expert, prompt, layers):
    """Rejections roll the head's cache back to the verified positions: every round's draft equals the draft of a
    head recomputed from scratch on the expert's true features (no cache), at every round."""
    head = random_head(expert, [0, 2, 3, 5, 7, 9, 10, 11], seed=4, scale=1.5, feature_layers=layers)
    run = head_speculative(expert, head, prompt, max_new_tokens=30, gamma=3, temperature=0)
    assert [it.draft for it in run.trace if it.draft] == from_scratch_drafts(expert, head, prompt, run.trace)
    kept = [it.n_accepted for it in run.trace if it.draft]
    assert 0 in kept and max(kept) > 0, "the run must see rejections and acceptances"


@KINDS
@pytest.mark.parametrize("warp", [{"temperature": 1.0}, {"temperature": 0.7, "top_k": 3}], ids=["T1", "T0.7-top3"])
def test_two_rounds_with_a_trimmed_head_are_exact(prompt, one_thread, warp, layers):
    """The exact check of notebook 03 (every path enumerated in float64): round 1 (the prompt, one token from p)
    and round 2 (γ = 2 head drafts from a 4-token V_draft, 2 of the 6 tokens never drafted), continued by the
    expert, give the expert's distribution of the next 4 tokens to 1e-6."""
    expert = tiny_llama(2, layers=2, vocab=EXACT_VOCAB).double()
    head = random_head(expert, [0, 2, 3, 5], scale=2.0, feature_layers=layers)
    gamma = 2

    def two_rounds():
        run = head_speculative(expert, head, prompt, max_new_tokens=gamma + 2, gamma=gamma, **warp)
        return tuple(run.trace[0].emitted + run.trace[1].emitted)

    outputs = exact_distribution(two_rounds, branching_draws=gamma + 2)
    assert any(len(y) == gamma + 2 for y in outputs)  # both drafts accepted + the bonus token, on some paths
    assert round_error(outputs, expert, prompt, gamma + 2, **warp) < 1e-6


@KINDS
def test_a_head_saved_and_loaded_drafts_the_same(expert, prompt, tmp_path, layers):
    head = random_head(expert, [0, 2, 3, 5, 7, 11], feature_layers=layers)
    head.save(tmp_path)
    loaded = load_head(expert, tmp_path)
    assert torch.equal(loaded.vocab, head.vocab) and loaded.n_parameters == head.n_parameters
    assert loaded.feature_layers == layers and ("feature_layers" in (tmp_path / "head.json").read_text()) == (
        layers != (-1,))  # an unfused head's file stays as it was
    runs = [head_speculative(expert, h, prompt, max_new_tokens=20, gamma=3, temperature=0) for h in (head, loaded)]
    assert [it.draft for it in runs[0].trace] == [it.draft for it in runs[1].trace]  # fp16 on disk: same argmaxes


def test_a_head_refuses_another_expert(expert, prompt, tmp_path):
    head = random_head(expert)
    other = tiny_llama(3, layers=1)
    with pytest.raises(ValueError, match="not attached to this expert"):
        head_speculative(other, head, prompt, max_new_tokens=5)
    with pytest.raises(ValueError, match="trained for another expert"):
        head.attach(tiny_llama(4, vocab=8))
    with pytest.raises(FileNotFoundError, match=r"python -m helpers\.train_head"):
        load_head(expert, tmp_path)


def test_a_fused_head_starts_as_the_unfused_one_and_reads_both_widths(expert, prompt):
    """``for_expert`` draws the same fc and layer for both kinds (the lever compares the input alone); ``read``
    maps the k·d true features to d and passes f̂ (d) through; the timed step reads what the head reads."""
    vocab = torch.tensor([0, 2, 3, 5])
    plain, fused = (DraftHead.for_expert(expert, vocab, seed=3, feature_layers=layers) for layers in ((-1,), FUSED))
    for name, value in plain.state_dict().items():
        assert torch.equal(value, fused.state_dict()[name]), name
    assert fused.n_parameters == plain.n_parameters + len(FUSED) * expert.config.hidden_size ** 2
    d = expert.config.hidden_size
    assert fused.read(torch.ones(1, 2, 3 * d)).shape == (1, 2, d) and torch.equal(fused.read(torch.ones(2, d)),
                                                                                    torch.ones(2, d))
    with pytest.raises(ValueError, match=r"reads 16 \(f_t\) or 3 x 16"):
        fused.read(torch.ones(1, 2 * d))
    with pytest.raises(ValueError, match="must end with -1"):
        DraftHead(head_config(expert, (0, 1)), vocab)
    HeadStep(fused, expert, prompt)()  # one timed draft step runs on the fused features
