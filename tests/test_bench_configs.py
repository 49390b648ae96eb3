"""helpers.bench_configs: which methods run and in what order, and HF assisted generation drafting exactly γ
tokens (tiny random models)."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_llama

from helpers import bench_configs
from helpers.bench_configs import assistant_drafts, check_methods, configurations, hf_kwargs

PROMPT = torch.tensor([[1, 2, 3]])


def test_default_methods_and_naive_always():
    assert check_methods(None) == ["naive", "naive_nocache", "hf_greedy", "speculative", "hf_assisted"]
    assert check_methods(["prompt-lookup", "self_draft", " hf_greedy "]) == ["naive", "hf_greedy", "self_draft",
                                                                           "prompt_lookup"]


def test_bad_methods_are_refused_with_the_choices():
    with pytest.raises(ValueError, match=r"unknown method\(s\) lookahead, medusa: choose from naive, naive_nocache"):
        check_methods(["naive", "medusa", "lookahead"])
    with pytest.raises(ValueError, match="list of names"):
        check_methods("naive,prompt_lookup")


def test_configurations_run_undrafted_methods_first_then_gamma_by_gamma():
    assert configurations([1, 3], ["naive", "speculative", "hf_greedy", "head"]) == [
        ("naive", "naive", None), ("hf_greedy", "hf_greedy", None),
        ("speculative_g1", "speculative", 1), ("head_g1", "head", 1),
        ("speculative_g3", "speculative", 3), ("head_g3", "head", 3)]


def test_every_method_has_a_label_and_every_drafting_one_a_drafter():
    assert set(bench_configs.METHODS) == set(bench_configs.LABELS)
    assert set(bench_configs.DRAFTING) <= set(bench_configs.DRAFTER)
    assert set(bench_configs.CONSTANT_GAMMA) <= set(bench_configs.OURS_DRAFTING) <= set(bench_configs.DRAFTING)


@pytest.mark.parametrize("gamma", [1, 3, 5])
def test_hf_assistant_drafts_exactly_gamma_tokens(one_thread, monkeypatch, gamma):
    """transformers ignores num_assistant_tokens passed to the expert's generate and ends drafts early (low
    confidence, the assistant's own EOS): under assistant_drafts() every draft has γ tokens, or what is left of
    the budget, and the assistant's config is restored afterwards."""
    expert, amateur = tiny_llama(0, layers=2), tiny_llama(1)
    n = 16
    drafts: list[tuple[int, int]] = []  # (tokens so far, drafted tokens)
    generate = amateur.generate

    def recording_generate(*args, **kwargs):
        out = generate(*args, **kwargs)
        so_far = kwargs.get("input_ids", args[0] if args else None).shape[1]
        drafts.append((so_far, out.sequences.shape[1] - so_far))
        return out

    monkeypatch.setattr(amateur, "generate", recording_generate)
    config = amateur.generation_config
    before = {name: getattr(config, name, None) for name in bench_configs.ASSISTANT_SETTINGS}
    with assistant_drafts(amateur, gamma):
        out = expert.generate(PROMPT, assistant_model=amateur, **hf_kwargs(expert, n, 0))
    assert out.shape[1] == PROMPT.shape[1] + n
    assert drafts
    for so_far, drafted in drafts:
        assert drafted == min(gamma, PROMPT.shape[1] + n - so_far - 1)
    assert {name: getattr(config, name, None) for name in bench_configs.ASSISTANT_SETTINGS} == before


def test_hf_sampling_is_plain_sampling_like_ours():
    model = tiny_llama(0)
    greedy, sampled = hf_kwargs(model, 5, 0), hf_kwargs(model, 5, 0.7)
    assert greedy["do_sample"] is False and greedy["min_new_tokens"] == greedy["max_new_tokens"] == 5
    assert sampled["do_sample"] is True and sampled["temperature"] == 0.7
    assert sampled["top_k"] == 0 and sampled["top_p"] == 1.0 and sampled["eos_token_id"] is None
