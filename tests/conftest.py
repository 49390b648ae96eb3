"""Tiny random models built in the tests (no download), and the pocket pair for the tests that need it."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from helpers.models import Pair, load_pair

VOCAB = 12
EOS = VOCAB - 1


def tiny_llama(seed: int, *, layers: int = 1, vocab: int = VOCAB, scale: float = 6.0) -> LlamaForCausalLM:
    """A random Llama with a tiny vocabulary. Its LM head is scaled up so that its next-token distributions are
    peaked (random models are otherwise nearly uniform, and an expert/amateur pair would hardly disagree)."""
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=layers,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                         bos_token_id=0, eos_token_id=vocab - 1, pad_token_id=0)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
    return model


@pytest.fixture(scope="session")
def tiny_pair() -> tuple[LlamaForCausalLM, LlamaForCausalLM]:
    """(expert, amateur): two different random models over the same 12-token vocabulary."""
    return tiny_llama(0, layers=2), tiny_llama(1)


@pytest.fixture
def one_thread():
    """Tiny models run fastest on one thread (no OpenMP hand-offs for 16x16 matrices)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def prompt() -> torch.Tensor:
    return torch.tensor([[1, 2, 3]])


@pytest.fixture(scope="session")
def pocket() -> Pair:
    return load_pair("pocket")
