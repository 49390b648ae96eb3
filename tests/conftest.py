"""Tiny random models built in the tests (no download), and the pocket pair for the tests that need it."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaForCausalLM

from helpers.models import Pair, load_pair, tiny_random_model

VOCAB = 12
EOS = VOCAB - 1


def tiny_llama(seed: int, *, layers: int = 1, vocab: int = VOCAB, scale: float = 6.0) -> LlamaForCausalLM:
    return tiny_random_model(seed, layers=layers, vocab=vocab, scale=scale)


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
