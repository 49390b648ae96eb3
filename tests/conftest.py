"""Tiny random models built in the tests (no download), and the pocket pair for the tests that need it.

The suite runs MKL on another code path than its native one (``MKL_CBWR``, set here before torch loads MKL; the
notebook kernels nbval starts inherit it): the fastest path whose rounding differs from the native kernels that
recorded the committed notebooks on this CPU (:func:`helpers.cbwr.other_regime`; ``AVX2`` on a CPU with AVX-512).
So every nbval run compares the committed outputs with outputs computed under another floating-point regime,
whatever CPU runs it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable

from helpers.cbwr import other_regime

if "MKL_CBWR" not in os.environ:
    os.environ["MKL_CBWR"] = other_regime()

import random

import pytest
import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

from helpers.data import RESULTS
from helpers.heads import DraftHead
from helpers.models import Pair, load_pair, tiny_random_model

VOCAB = 12
EOS = VOCAB - 1
WORDS = [f"w{i}" for i in range(10)]  # + <unk>, <eos> = the 12-token vocabulary of the tiny models


def word_tokenizer(words: list[str]) -> PreTrainedTokenizerFast:
    """A whitespace word-level tokenizer: <unk> = 0, <eos> = 1, then the words."""
    vocab = {w: i for i, w in enumerate(["<unk>", "<eos>", *words])}
    backend = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", eos_token="<eos>")


def tiny_llama(seed: int, *, layers: int = 1, vocab: int = VOCAB, scale: float = 6.0) -> LlamaForCausalLM:
    return tiny_random_model(seed, layers=layers, vocab=vocab, scale=scale)


@pytest.fixture(scope="session")
def tiny_pair() -> tuple[LlamaForCausalLM, LlamaForCausalLM]:
    """(expert, amateur): two different random models over the same 12-token vocabulary."""
    return tiny_llama(0, layers=2), tiny_llama(1)


EXACT_VOCAB = 6


@pytest.fixture(scope="session")
def exact_pair() -> tuple[LlamaForCausalLM, LlamaForCausalLM]:
    """(expert, amateur) over 6 tokens, in float64, for the exact checks: every draft path is enumerated (6^γ), and
    after [1, 2, 3] their top-3 tokens overlap, so that at T=0.7, top-k=3 drafts are accepted and rejected too."""
    return tiny_llama(2, layers=2, vocab=EXACT_VOCAB).double(), tiny_llama(3, vocab=EXACT_VOCAB).double()


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
def tiny_text_pair(tiny_pair) -> Pair:
    """The tiny models with a word tokenizer, as a Pair (for code that encodes and decodes text)."""
    return Pair(expert=tiny_pair[0], amateur=tiny_pair[1], tokenizer=word_tokenizer(WORDS), name="tiny",
                expert_name="tiny-expert", amateur_name="tiny-amateur", source="built in the tests")


@pytest.fixture(scope="module")
def teacher() -> LlamaForCausalLM:
    """The tiny teacher of the distillation and draft-head pipelines."""
    return tiny_llama(3, layers=2)


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    """The word tokenizer with a pad token (= EOS), for batched generation."""
    tok = word_tokenizer(WORDS)
    tok.pad_token = tok.eos_token
    return tok


def word_prompts(n: int, seed: int = 0) -> list[str]:
    """n prompts of 1-4 random words of the tiny vocabulary."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4))) for _ in range(n)]


@pytest.fixture(scope="session")
def pocket() -> Pair:
    return load_pair("pocket")


def random_head(expert: LlamaForCausalLM, vocab: list[int] | None = None, seed: int = 1,
                scale: float = 3.0, feature_layers: tuple[int, ...] = (-1,)) -> DraftHead:
    """A draft head with random weights large enough that its drafts differ from position to position."""
    ids = torch.arange(expert.config.vocab_size) if vocab is None else torch.tensor(vocab)
    head = DraftHead.for_expert(expert, ids, seed=seed, feature_layers=feature_layers)
    with torch.no_grad():
        for parameter in head.parameters():
            parameter.mul_(scale)
    return head.eval()


def output_fields(cell: dict) -> list[str]:
    """What nbval compares first: the kinds of a cell's outputs (a stream by its name; consecutive writes to one
    stream count once, as a kernel may flush them in several pieces)."""
    kinds = [o.get("name", o["output_type"]) if o["output_type"] == "stream" else o["output_type"]
             for o in cell.get("outputs", [])]
    return [kind for i, kind in enumerate(kinds) if i == 0 or kind != kinds[i - 1]]


def assert_readme_rows(pattern: str, readme_row: Callable[[dict], str]) -> None:
    """Every committed result file matching ``pattern`` has its rendered README row in the README, verbatim."""
    files = sorted(RESULTS.glob(pattern))
    assert files, f"no committed {pattern}"
    readme = (RESULTS.parent.parent / "README.md").read_text()
    for path in files:
        assert readme_row(json.loads(path.read_text())) in readme, f"README: render {path.name}'s row again"


def readme_contents_row(notebook: str) -> str:
    """The README contents table's row of ``notebook`` (e.g. ``"07_draft_heads"``): the typed summary whose
    run-dependent numbers the tests of the modules that compute them check against the committed files."""
    readme = (RESULTS.parent.parent / "README.md").read_text()
    rows = [line for line in readme.splitlines() if line.startswith("| [") and f"(notebooks/{notebook}.ipynb)" in line]
    assert len(rows) == 1, f"README: one contents row for {notebook}, found {len(rows)}"
    return rows[0]


def verdict(low: float, high: float) -> str:
    """How the README words a speedup's interval: it pays (above 1), loses (below 1) or is not resolved from 1."""
    return "pays" if low > 1 else "loses" if high < 1 else "not resolved"
