"""helpers.models: the offline pocket pair, the early-exit amateur, the hub code path on local folders."""

from __future__ import annotations

import pytest
import torch
from conftest import WORDS, tiny_llama, word_tokenizer

from helpers import models
from helpers.decoding import naive
from helpers.models import check_same_tokenizer, count_parameters, early_exit, load_pair


@pytest.fixture
def saved_pair(tmp_path, tiny_pair):
    """The tiny expert and amateur saved like hub models: folders with config, weights and tokenizer."""
    for name, model in zip(("expert", "amateur"), tiny_pair, strict=True):
        model.save_pretrained(tmp_path / name)
        word_tokenizer(WORDS).save_pretrained(tmp_path / name)
    return tmp_path


@pytest.mark.pocket
def test_pocket_pair_loads_and_writes_english(pocket):
    assert pocket.expert_name == "SmolLM2-135M-Instruct"
    assert pocket.expert.config.num_hidden_layers == 30 and pocket.expert.config.vocab_size == 49152
    assert 134e6 < count_parameters(pocket.expert) < 135e6
    assert pocket.amateur_name == "distilled" and pocket.amateur.config.vocab_size == 49152
    assert 10e6 < count_parameters(pocket.amateur) < 15e6  # the distilled draft: 30 MB in fp16
    assert pocket.amateur.dtype == pocket.expert.dtype
    text = pocket.decode(naive(pocket.expert, pocket.encode("The capital of France is"), max_new_tokens=3,
                               temperature=0).new_token_ids)
    assert "Paris" in text
    assert "SmolLM2-135M-Instruct" in pocket.describe()


@pytest.mark.pocket
def test_converted_pocket_model_is_reused(pocket, monkeypatch):
    """The second load reads the safetensors cache: neither pip nor the GGUF converter runs again."""
    def refuse(*args, **kwargs):
        raise AssertionError("the pocket model should come from the cache")

    monkeypatch.setattr(models, "fetch_pocket_gguf", refuse)
    monkeypatch.setattr(models.subprocess, "run", refuse)
    again = load_pair("pocket")
    prompt = pocket.encode("Barack Obama was")
    with torch.no_grad():
        assert torch.equal(again.expert(prompt).logits, pocket.expert(prompt).logits)


@pytest.mark.pocket
def test_the_early_exit_amateur_stays_available_by_name(pocket):
    pair = load_pair("pocket", amateur="early-exit")
    assert pair.amateur.config.num_hidden_layers == models.EARLY_EXIT_LAYERS
    assert count_parameters(pair.amateur, unique_to=pair.expert) == 0  # it shares the expert's weights


def test_early_exit_amateur_is_the_experts_first_layers(prompt):
    expert = tiny_llama(5, layers=4)
    amateur = early_exit(expert, 2)
    assert amateur.config.num_hidden_layers == 2 and expert.config.num_hidden_layers == 4
    assert count_parameters(amateur, unique_to=expert) == 0
    with torch.no_grad():
        hidden = expert(prompt, output_hidden_states=True).hidden_states[2]  # after decoder layer 2
        manual = expert.lm_head(expert.model.norm(hidden))
        assert torch.allclose(amateur(prompt).logits, manual, atol=1e-6)


def test_early_exit_refuses_impossible_depths(tiny_pair):
    expert, _ = tiny_pair
    for n in (0, 2, 5):
        with pytest.raises(ValueError, match="n_layers"):
            early_exit(expert, n)


def test_local_folders_load_like_hub_models(saved_pair, tiny_pair, prompt):
    pair = load_pair(f"{saved_pair / 'expert'}+{saved_pair / 'amateur'}")
    assert pair.amateur_name.endswith("amateur") and pair.device.type == "cpu"
    assert pair.expert.dtype == torch.float32
    with torch.no_grad():
        assert torch.allclose(pair.expert(prompt).logits, tiny_pair[0](prompt).logits)
        assert torch.allclose(pair.amateur(prompt).logits, tiny_pair[1](prompt).logits)
    assert pair.encode("w3 w4").tolist() == [[5, 6]]


def test_the_amateur_can_be_replaced_by_name(saved_pair):
    pair = load_pair(f"{saved_pair / 'expert'}+{saved_pair / 'amateur'}", amateur="early-exit-1")
    assert pair.amateur_name == "early-exit-1" and pair.amateur.config.num_hidden_layers == 1


def test_pairs_with_different_tokenizers_are_refused(saved_pair, tiny_pair):
    other = saved_pair / "other"
    tiny_pair[1].save_pretrained(other)
    word_tokenizer([f"v{i}" for i in range(10)]).save_pretrained(other)  # same size, other words
    with pytest.raises(ValueError, match="different vocabularies"):
        load_pair(f"{saved_pair / 'expert'}+{other}")


def test_tokenizer_check_compares_vocabularies_not_names():
    check_same_tokenizer(word_tokenizer(WORDS), word_tokenizer(WORDS))
    with pytest.raises(ValueError, match="different ids"):
        check_same_tokenizer(word_tokenizer(WORDS), word_tokenizer(WORDS[::-1]))


def test_hub_preset_without_network_fails_fast_and_names_the_offline_preset(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HOME", str(tmp_path))  # an empty Hugging Face cache
    monkeypatch.setattr(models, "_hub_reachable", lambda timeout=3.0: False)
    with pytest.raises(RuntimeError, match="load_pair\\('pocket'\\)"):
        load_pair("gpt2")


def test_unknown_pair_names_are_refused():
    with pytest.raises(ValueError, match="Unknown pair"):
        load_pair("gpt-17")


def test_cpu_defaults():
    assert models.default_dtype(torch.device("cpu")) == torch.float32
    assert models.configure_cpu_threads() >= 1


def test_self_draft_is_a_half_precision_copy(prompt):
    expert = tiny_llama(6, layers=2)
    for name, dtype in (("self-fp16", torch.float16), ("self-bf16", torch.bfloat16)):
        draft = models.AMATEURS[name](expert)
        assert draft.dtype == dtype and expert.dtype == torch.float32
        assert count_parameters(draft, unique_to=expert) == count_parameters(expert)  # a copy, not shared
        with torch.no_grad():
            assert torch.allclose(draft(prompt).logits.float(), expert(prompt).logits, atol=0.1)


def test_encode_chat_needs_a_chat_template(tiny_text_pair):
    with pytest.raises(ValueError, match="no chat template"):
        tiny_text_pair.encode_chat("w1 w2")


@pytest.mark.pocket
def test_encode_chat_ends_where_the_assistant_answers(pocket):
    ids = pocket.encode_chat("Name a colour.")
    text = pocket.decode(ids[0])
    assert "Name a colour." in text and text.rstrip().endswith("assistant")
