"""The head's lesson, isolated (notebook 07, section 5): what the expert's features buy, and what the trimmed
draft vocabulary buys. ``python -m helpers.ablation --out data/results/ablation-<cpu>.json``

The committed draft head and the committed distilled draft differ in three ways at once: the head reads the expert's
features, it reads out over the 8,192 rows of V_draft instead of all 49,152, and the two were trained for other
epochs. Here four drafters for the pocket expert learn from the same teacher text (the expert's continuations of
the first ``n_prompts`` lines of ``data/distill_prompts.txt``, :func:`helpers.distill.generate`), the same training
and validation split, the same number of epochs and seed, and one V_draft
(:func:`helpers.train_head.draft_vocabulary`); each family keeps its own loss and optimiser settings (the head's
learning rate and batch of :class:`helpers.train_head.HeadSettings`, the draft's of :class:`helpers.distill.Settings`):

- ``head``: EAGLE-1's head (:class:`helpers.heads.DraftHead`), reads f_t and x_{t+1}, reads out over V_draft;
- ``token-only head``: the same layer with its feature input set to zero in training and in drafting
  (:class:`TokenOnlyHead`): the same cost and V_draft, but it knows the context only through the tokens in its own
  KV cache;
- ``draft``: the distilled draft's shape (:class:`helpers.distill.StudentShape`), full vocabulary;
- ``draft over V_draft``: the same with its readout cut to V_draft (:class:`TrimmedReadout`), trained on the
  teacher's targets restricted to V_draft (:func:`trimmed_loss`).

head vs token-only head is what the features buy; draft over V_draft vs draft is what trimming buys. Measured on the
held-out requests (``data/eval_prompts.txt``, chat template, EOS on; no topic or template of the training prompts):
α at temperature 1 and the greedy agreement prompt by prompt, with 95 % bootstrap intervals over prompts and the
paired differences of the two contrasts; α by draft depth; tokens per expert call; and c, one draft step / one
expert step, timed interleaved on several prompts (:func:`helpers.timing.drafter_costs`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers import LlamaForCausalLM, PreTrainedModel, PreTrainedTokenizerBase

from helpers import distill, train_head
from helpers.compare import Interval, mean_of
from helpers.data import DISTILL_PROMPTS, EVAL_PROMPTS, read_json, read_prompts, write_json
from helpers.decoding import Generation, speculative
from helpers.heads import DraftHead, HeadStep, head_speculative
from helpers.machine import fast_bf16, machine_info
from helpers.models import count_parameters, load_pair
from helpers.protocol import depth_acceptance, round_counts
from helpers.timing import ForwardStep, drafter_costs, median
from helpers.training import fit

DRAFTERS = ("head", "token-only head", "draft", "draft over V_draft")
CONTRASTS = {"features": ("head", "token-only head"), "trimming": ("draft over V_draft", "draft")}
"""What each pair of drafters isolates: (with, without)."""


@dataclass
class AblationSettings:
    """Everything that determines a run (stored in the result file)."""

    n_prompts: int = 1024
    """Training prompts: the first lines of ``data/distill_prompts.txt`` (the committed drafters used 5,120)."""
    epochs: float = 4.0
    draft_vocab: int = 8192
    eval_prompts: int = 24
    """Held-out requests (the first lines of ``data/eval_prompts.txt``); an interval needs 20 or more."""
    eval_tokens: int = 48
    gamma: int = 3
    cost_prompts: int = 4
    timing_repeats: int = 20
    seed: int = 0

    def head(self) -> train_head.HeadSettings:
        return train_head.HeadSettings(n_prompts=self.n_prompts, draft_vocab=self.draft_vocab, epochs=self.epochs,
                                       seed=self.seed)

    def draft(self) -> distill.Settings:
        return dataclasses.replace(self.head().teacher(), epochs=self.epochs)


QUICK = AblationSettings(n_prompts=64, epochs=1.0, draft_vocab=2048, eval_prompts=2, eval_tokens=12, cost_prompts=1,
                         timing_repeats=3)
"""``--quick``: every stage in a few minutes (no interval: too few prompts)."""


# ---------------------------------------------------------------------------------------------- drafters
class TokenOnlyHead(DraftHead):
    """Ablation (b): EAGLE-1's head with its feature input f_t set to zero, in training and in drafting. The same
    ``fc``, layer, V_draft and cost as :class:`~helpers.heads.DraftHead`; what it knows of the context comes from the
    tokens in its own KV cache: a one-layer token-level drafter that borrows the expert's embedding and LM head."""

    def forward(self, features: torch.Tensor, next_tokens: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        return super().forward(torch.zeros_like(features), next_tokens, *args, **kwargs)


class TrimmedReadout(torch.nn.Module):
    """Ablation (a): a draft's tied LM head cut to the rows of V_draft. The product runs over those N rows only; the
    logits come back over the whole vocabulary, −∞ outside V_draft (q = 0 there, as for the head), so the draft
    plugs into :func:`helpers.decoding.speculative` unchanged. In eval mode the rows are a frozen copy."""

    def __init__(self, embedding: torch.nn.Embedding, vocab: torch.Tensor) -> None:
        super().__init__()
        self.embedding = embedding
        self.register_buffer("vocab", torch.as_tensor(vocab, dtype=torch.long))
        index = torch.full((embedding.num_embeddings,), -1, dtype=torch.long)
        index[self.vocab] = torch.arange(len(self.vocab))
        self.register_buffer("index", index)
        """A token id's position in V_draft, −1 outside it."""
        self.rows: torch.Tensor | None = None

    @property
    def out_features(self) -> int:
        """The vocabulary the logits cover (what the decoders check against the expert's)."""
        return self.embedding.num_embeddings

    def train(self, mode: bool = True) -> TrimmedReadout:
        super().train(mode)
        self.rows = None if mode else self.embedding.weight[self.vocab].detach().clone()
        return self

    def trimmed(self, hidden: torch.Tensor) -> torch.Tensor:
        """The logits over V_draft, (..., N)."""
        rows = self.embedding.weight[self.vocab] if self.rows is None else self.rows
        return hidden @ rows.T

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        out = hidden.new_full((*hidden.shape[:-1], self.embedding.num_embeddings), float("-inf"))
        out[..., self.vocab] = self.trimmed(hidden)
        return out


def trimmed_student(teacher: PreTrainedModel, shape: distill.StudentShape, vocab: torch.Tensor,
                    seed: int = 0) -> LlamaForCausalLM:
    """:func:`helpers.distill.make_student` with its readout cut to ``vocab`` (:class:`TrimmedReadout`)."""
    student = distill.make_student(teacher, shape, seed)
    student.lm_head = TrimmedReadout(student.get_input_embeddings(), vocab)
    return student


def trimmed_loss(student: LlamaForCausalLM, examples: Sequence[distill.Example], pad_id: int, ce_weight: float,
                 autocast: bool | None = False) -> tuple[torch.Tensor, dict[str, float]]:
    """:func:`helpers.distill.distillation_loss` (renormalised top-k) for a draft whose readout is V_draft: the
    teacher's top-k targets outside V_draft are dropped and the rest renormalised (the best a draft limited to
    V_draft can do, as for the head); positions whose whole top-k lies outside are skipped; the written token's
    cross-entropy counts where that token lies in V_draft."""
    readout = student.lm_head
    if not isinstance(readout, TrimmedReadout):
        raise TypeError("trimmed_loss needs a draft made by trimmed_student (its lm_head is a TrimmedReadout)")
    tokens, mask, row, col, targets, target_logp, next_token = distill.padded_batch(examples, pad_id)
    enabled = fast_bf16(student.device) if autocast is None else autocast
    with torch.autocast(student.device.type, dtype=torch.bfloat16, enabled=enabled):
        hidden = student.model(input_ids=tokens, attention_mask=mask).last_hidden_state[row, col]
        logits = readout.trimmed(hidden)
    logq = torch.log_softmax(logits.float(), dim=-1)
    where = readout.index[targets]
    inside = where >= 0
    kept = inside.any(-1)
    target = torch.softmax(target_logp.masked_fill(~inside, float("-inf"))[kept], dim=-1)
    soft = -(target * logq[kept].gather(1, where[kept].clamp(min=0))).sum(-1).mean()
    written = readout.index[next_token]
    hard = -logq[written >= 0].gather(1, written[written >= 0, None]).mean()
    top1 = (logq.argmax(-1) == where[:, 0]).float().mean()
    return soft + ce_weight * hard, {"soft": soft.item(), "hard": hard.item(), "top1": top1.item()}


# ---------------------------------------------------------------------------------------------- training
@dataclass
class TeacherData:
    """The shared data: one split, the same sequences as draft examples and as head sequences, and V_draft."""

    train_examples: list[distill.Example]
    valid_examples: list[distill.Example]
    train_sequences: list[train_head.HeadExample]
    valid_sequences: list[train_head.HeadExample]
    vocab: torch.Tensor


def teacher_data(expert: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, settings: AblationSettings, work: Path,
                 prompts: Sequence[str], *, feature_layers: Sequence[int] = (-1,),
                 progress: bool = True) -> TeacherData:
    """Teacher shards and features in ``work`` (resumable; the features of a fused head's ``feature_layers`` in
    ``work/features-fused``), split 95/5 with one seeded shuffle, and V_draft from the training part."""
    shards = distill.generate(expert, tokenizer, prompts, work / "teacher", settings.draft(), progress=progress)
    folder = work / ("features" if tuple(feature_layers) == (-1,) else "features-fused")
    sequences = train_head.load_sequences(shards, train_head.features(expert, shards, folder, layers=feature_layers,
                                                                      progress=progress))
    examples = distill.load_examples(shards)
    order = list(range(len(examples)))
    random.Random(settings.seed).shuffle(order)
    n_valid = max(1, len(order) // 20)
    valid, train = order[:n_valid], order[n_valid:]
    train_sequences = [sequences[i] for i in train]
    vocab = train_head.draft_vocabulary(train_sequences, settings.draft_vocab, tokenizer.eos_token_id)
    return TeacherData([examples[i] for i in train], [examples[i] for i in valid], train_sequences,
                       [sequences[i] for i in valid], vocab)


def train_heads(expert: PreTrainedModel, data: TeacherData, settings: AblationSettings, work: Path, *,
                progress: bool = True) -> dict[str, tuple[DraftHead, list[dict]]]:
    """The head and the token-only head, each by :func:`helpers.train_head.train` from the same initial weights."""
    heads = {}
    for name, cls in (("head", DraftHead), ("token-only head", TokenOnlyHead)):
        head = cls.for_expert(expert, data.vocab, seed=settings.seed)
        log = train_head.train(head, data.train_sequences, data.valid_sequences, work / name.replace(" ", "-"),
                               settings.head(), progress=progress)
        heads[name] = (head.eval(), log)
    return heads


def train_drafts(expert: PreTrainedModel, data: TeacherData, settings: AblationSettings, pad_id: int, work: Path, *,
                 progress: bool = True) -> dict[str, tuple[LlamaForCausalLM, list[dict]]]:
    """The distilled draft (:func:`helpers.distill.train`) and the same draft over V_draft (:func:`trimmed_loss`),
    from the same initial weights."""
    s = settings.draft()
    full = distill.make_student(expert, s.student, s.seed)
    log_full = distill.train(full, data.train_examples, data.valid_examples, work / "draft", s, pad_id,
                             progress=progress)
    trimmed = trimmed_student(expert, s.student, data.vocab, s.seed)

    @torch.no_grad()
    def validate() -> dict[str, float]:
        was_training = trimmed.training
        trimmed.eval()
        batches = range(0, len(data.valid_examples), s.train_batch)
        parts = [trimmed_loss(trimmed, data.valid_examples[i:i + s.train_batch], pad_id, s.ce_weight, s.autocast)
                 for i in batches]
        trimmed.train(was_training)
        return {"loss": sum(float(loss) for loss, _ in parts) / len(parts),
                "top1": sum(p["top1"] for _, p in parts) / len(parts)}

    log_trimmed = fit(trimmed, data.train_examples,
                      lambda batch: trimmed_loss(trimmed, batch, pad_id, s.ce_weight, s.autocast), validate,
                      work / "draft-over-V_draft", epochs=s.epochs, batch=s.train_batch, lr=s.lr, warmup=s.warmup,
                      weight_decay=0.01, seed=s.seed, desc="draft over V_draft trains", progress=progress)
    return {"draft": (full.eval(), log_full), "draft over V_draft": (trimmed.eval(), log_trimmed)}


# -------------------------------------------------------------------------------------------- evaluation
Decode = Callable[[torch.Tensor, float, torch.Generator], Generation]


def decoders(expert: PreTrainedModel, drafters: dict[str, torch.nn.Module], *, gamma: int, max_new_tokens: int,
             eos_token_id: int | None) -> dict[str, Decode]:
    """Speculative decoding with each drafter: heads through :func:`helpers.heads.head_speculative`, drafts
    through :func:`helpers.decoding.speculative`."""
    def one(drafter: torch.nn.Module) -> Decode:
        if isinstance(drafter, DraftHead):
            return lambda ids, t, g: head_speculative(expert, drafter, ids, max_new_tokens=max_new_tokens,
                                                      gamma=gamma, temperature=t, generator=g,
                                                      eos_token_id=eos_token_id)
        return lambda ids, t, g: speculative(expert, drafter, ids, max_new_tokens=max_new_tokens, gamma=gamma,
                                             temperature=t, generator=g, eos_token_id=eos_token_id)
    return {name: one(d) for name, d in drafters.items()}


@torch.no_grad()
def acceptance(decode: dict[str, Decode], prompts: Sequence[torch.Tensor], *, seed: int = 0,
               progress: bool = True) -> dict[str, dict[str, list[dict]]]:
    """Every drafter on every prompt, at temperature 1 (``"sampled"``) and greedy (``"greedy"``), the same seed per
    prompt for every drafter: per run its α (mean β), its ``[drafted, kept]`` rounds, tokens and expert calls."""
    runs: dict[str, dict[str, list[dict]]] = {name: {"sampled": [], "greedy": []} for name in decode}
    for i, ids in enumerate(tqdm(prompts, desc="acceptance", unit="prompt", disable=not progress)):
        for name, run in decode.items():
            for mode, temperature in (("sampled", 1.0), ("greedy", 0.0)):
                out = run(ids, temperature, torch.Generator(ids.device).manual_seed(seed * 1009 + i))
                runs[name][mode].append({"alpha": out.stats.mean_beta, "rounds": round_counts(out),
                                         "tokens": out.new_token_ids, "expert_calls": out.stats.expert_calls})
    return runs


def costs(expert: PreTrainedModel, drafters: dict[str, torch.nn.Module], prompts: Sequence[torch.Tensor], *,
          repeats: int) -> dict[str, list[float]]:
    """c of every drafter on each prompt: one draft step / one expert step, all steps interleaved
    (:func:`helpers.timing.drafter_costs`)."""
    out: dict[str, list[float]] = {name: [] for name in drafters}
    for ids in prompts:
        steps = {name: HeadStep(d, expert, ids) if isinstance(d, DraftHead) else ForwardStep(d, ids, 1)
                 for name, d in drafters.items()}
        c, _ = drafter_costs(expert, ids, steps, [], repeats)
        for name, value in c.items():
            out[name].append(value)
    return out


def held_out_coverage(runs: Sequence[dict], vocab: torch.Tensor) -> float:
    """The share of the expert's greedy tokens on the held-out requests that lie in V_draft."""
    written = torch.tensor([t for r in runs for t in r["tokens"]], dtype=torch.long)
    return float(torch.isin(written, vocab).float().mean())


# ------------------------------------------------------------------------------------------------- run
def claim_work(work: Path, wanted: dict) -> None:
    """Make ``work`` and record the settings its checkpoints depend on; refuse a folder made with other ones."""
    work.mkdir(parents=True, exist_ok=True)
    record = work / "settings.json"
    if record.exists() and json.loads(record.read_text()) != wanted:
        raise ValueError(f"{work} holds a run with other settings; resuming would mix them. Choose another folder "
                         "with --work, or delete this one.")
    record.write_text(json.dumps(wanted, indent=1))


def run(expert: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, settings: AblationSettings, *, work: Path,
        encode: Callable[[str], torch.Tensor], prompts_file: Path = DISTILL_PROMPTS, eval_file: Path = EVAL_PROMPTS,
        command: str = "", progress: bool = True) -> dict:
    """Every stage; the teacher data, features and training checkpoints in ``work`` are reused by a rerun with the
    same settings. ``encode`` turns a held-out request into prompt ids (the pocket pair's chat template)."""
    claim_work(work, {k: v for k, v in asdict(settings).items() if k in ("n_prompts", "epochs", "draft_vocab", "seed")})
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    data = teacher_data(expert, tokenizer, settings, work, read_prompts(prompts_file, settings.n_prompts),
                        progress=progress)
    seconds["data"] = time.perf_counter() - start
    trained = {**train_heads(expert, data, settings, work, progress=progress),
               **train_drafts(expert, data, settings, tokenizer.pad_token_id, work, progress=progress)}
    seconds["train"] = {name: log[-1]["seconds"] if log else 0.0 for name, (_, log) in trained.items()}
    drafters = {name: trained[name][0] for name in DRAFTERS}
    prompts = [encode(p) for p in read_prompts(eval_file, settings.eval_prompts)]
    start = time.perf_counter()
    runs = acceptance(decoders(expert, drafters, gamma=settings.gamma, max_new_tokens=settings.eval_tokens,
                               eos_token_id=tokenizer.eos_token_id), prompts, seed=settings.seed, progress=progress)
    seconds["acceptance"] = time.perf_counter() - start
    start = time.perf_counter()
    c = costs(expert, drafters, prompts[:settings.cost_prompts], repeats=settings.timing_repeats)
    seconds["costs"] = time.perf_counter() - start
    return {"settings": asdict(settings), "command": command, "machine": machine_info(expert.device),
            "seconds": seconds, "train_tokens": distill.count_tokens(data.train_examples),
            "coverage": {"validation": train_head.coverage(data.valid_sequences, data.vocab),
                         "held_out": held_out_coverage(runs["head"]["greedy"], data.vocab)},
            "drafters": {name: {"parameters": (drafters[name].n_parameters if isinstance(drafters[name], DraftHead)
                                               else count_parameters(drafters[name])),
                                "readout_rows": len(data.vocab) if name != "draft" else expert.config.vocab_size,
                                "valid_top1": trained[name][1][-1]["valid_top1"] if trained[name][1] else None,
                                "c": c[name], "runs": runs[name]}
                         for name in DRAFTERS}}


# --------------------------------------------------------------------------------------------- summary
def _alphas(runs: Sequence[dict]) -> list[float | None]:
    """Each run's α; None where it judged no draft (NaN in memory, null in the file)."""
    return [None if r["alpha"] is None or math.isnan(r["alpha"]) else r["alpha"] for r in runs]


def _interval(values: Sequence[float | None]) -> Interval:
    return mean_of([v for v in values if v is not None])


def acceptance_summary(runs: dict[str, list[dict]]) -> dict:
    """One drafter's :func:`acceptance` records: α (T = 1) and greedy agreement with their intervals over prompts,
    α by depth (T = 1), tokens per expert call (greedy)."""
    greedy = runs["greedy"]
    return {"alpha": _interval(_alphas(runs["sampled"])), "agreement": _interval(_alphas(greedy)),
            "alpha_by_depth": depth_acceptance(c for r in runs["sampled"] for c in r["rounds"]),
            "tokens_per_call": sum(len(r["tokens"]) for r in greedy) / sum(r["expert_calls"] for r in greedy)}


def paired(a: dict[str, list[dict]], b: dict[str, list[dict]]) -> dict[str, Interval]:
    """Drafter a − drafter b, prompt by prompt, for α (T = 1) and the greedy agreement; prompts where either judged
    nothing are left out."""
    out = {}
    for mode, key in (("sampled", "alpha"), ("greedy", "agreement")):
        pairs = zip(_alphas(a[mode]), _alphas(b[mode]), strict=True)
        out[key] = mean_of([x - y for x, y in pairs if x is not None and y is not None])
    return out


def summary(result: dict) -> dict:
    """Per drafter: :func:`acceptance_summary` and the median c; per contrast: the :func:`paired` differences and
    the ratio of the two c."""
    drafters = {name: {**acceptance_summary(d["runs"]), "c": median(d["c"]), "parameters": d["parameters"],
                       "readout_rows": d["readout_rows"]}
                for name, d in result["drafters"].items()}
    contrasts = {contrast: {**paired(result["drafters"][a]["runs"], result["drafters"][b]["runs"]),
                            "c_ratio": drafters[a]["c"] / drafters[b]["c"]}
                 for contrast, (a, b) in CONTRASTS.items()}
    return {"drafters": drafters, "contrasts": contrasts}


def interval_cell(i: Interval) -> str:
    return f"{i.mean:.3f} [{i.low:.3f}, {i.high:.3f}]"


def difference_cell(i: Interval) -> str:
    """A paired difference and its interval, signed."""
    return f"{i.mean:+.3f} [{i.low:+.3f}, {i.high:+.3f}]"


def markdown_table(result: dict) -> str:
    """One row per drafter: what it reads, its readout, c, α, agreement, α by depth, tokens per expert call."""
    s = summary(result)
    reads = {"head": "f_t, x_{t+1}", "token-only head": "x_{t+1}", "draft": "tokens", "draft over V_draft": "tokens"}
    lines = ["| drafter | reads | readout rows | trained parameters | c | α (T = 1) | greedy agreement | "
             "α by depth 1, 2, 3 (T = 1) | tokens per expert call |", "|---|---|---|---|---|---|---|---|---|"]
    for name, d in s["drafters"].items():
        depth = ", ".join(f"{a:.2f}" for a in d["alpha_by_depth"][:3])
        lines.append(f"| {name} | {reads[name]} | {d['readout_rows']:,} | {d['parameters'] / 1e6:.1f}M | "
                     f"{d['c']:.3f} | {interval_cell(d['alpha'])} | {interval_cell(d['agreement'])} | {depth} | "
                     f"{d['tokens_per_call']:.2f} |")
    return "\n".join(lines)


def contrast_text(result: dict) -> str:
    """The two contrasts in words, with their paired intervals over prompts."""
    return "\n".join(f"{name} ({a} − {b}): α {difference_cell(c['alpha'])}, greedy agreement "
                     f"{difference_cell(c['agreement'])} over {c['alpha'].n} prompts, at {c['c_ratio']:.2f}× the c"
                     for (name, c), (a, b) in zip(summary(result)["contrasts"].items(), CONTRASTS.values(),
                                                  strict=True))


def readme_row(result: dict) -> str:
    """The README's row for a result file (a test checks that the README holds it verbatim)."""
    st, s = result["settings"], summary(result)
    what = (f"**the head's lesson, isolated** (notebook 07; four drafters trained on the same data, split, epochs "
            f"and seed: the expert's continuations of "
            f"{st['n_prompts']:,} training prompts, {st['epochs']:g} epochs, one V_draft of {st['draft_vocab']:,}; "
            f"{st['eval_prompts']} held-out chat requests, chat template, EOS on, up to {st['eval_tokens']} tokens, "
            f"γ = {st['gamma']}; one run; α at T = 1 [95 % CI over requests], c the median over "
            f"{st['cost_prompts']} requests)")
    drafters = "; ".join(f"{name}: α {interval_cell(d['alpha'])}, c {d['c']:.3f}" for name, d in s["drafters"].items())
    contrasts = "; ".join(f"{name} ({a} − {b}): α {difference_cell(c['alpha'])} at {c['c_ratio']:.2f}× the c"
                          for (name, c), (a, b) in zip(s["contrasts"].items(), CONTRASTS.values(), strict=True))
    return f"| {what} | {result['machine']['cpu_kind']} | {drafters} — {contrasts} | `{result['command']}` |"


def experiment_cli(argv: Sequence[str] | None, *, module: str, doc: str, default: Any, quick: Any,
                   texts: Sequence[Callable[[dict], str]], measure: Callable[..., dict]) -> None:
    """The command line of a training experiment, ``python -m helpers.<module>`` (this module's and
    :mod:`helpers.head_levers`'): ``--show FILE`` prints each of ``texts`` of a result file (its table, its
    contrasts in words, its README row); otherwise the settings
    (``default`` or ``quick``, then one option per field), a resumable ``--work`` folder and the recorded command go to
    ``measure(pair, settings, work=..., command=..., progress=...)``, whose result is written to ``--out`` and shown
    when it has an interval (20 or more evaluation prompts)."""
    name = module.replace("_", "-")
    parser = argparse.ArgumentParser(prog=f"python -m helpers.{module}", description=doc.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=None, help="the result file (JSON); required unless --show")
    parser.add_argument("--show", type=Path, default=None, help="print the table of an existing result file")
    parser.add_argument("--quick", action="store_true", help="every stage in a few minutes, no intervals")
    parser.add_argument("--work", type=Path, default=None, help=f"resumable work folder (default output/{name})")
    for field, value in asdict(default).items():
        parser.add_argument(f"--{field.replace('_', '-')}", type=type(value), default=None,
                            help=f"default {value} ({getattr(quick, field)} with --quick)")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    if args.show is not None:
        print("\n".join(text(read_json(args.show.resolve())) for text in texts))
        return
    if args.out is None:
        parser.error(f"give --out FILE (e.g. data/results/{name}-<cpu>.json), or --show FILE")
    settings = dataclasses.replace(quick if args.quick else default)
    for field in asdict(default):
        if getattr(args, field) is not None:
            setattr(settings, field, getattr(args, field))
    work = args.work or Path(f"output/{name}-quick" if args.quick else f"output/{name}")
    command = f"python -m helpers.{module} " + " ".join(shlex.quote(a) for a in (argv if argv is not None
                                                                                 else sys.argv[1:]))
    result = measure(load_pair("pocket", amateur="early-exit"), settings, work=work, command=command.strip(),
                     progress=not args.no_progress)
    write_json(result, args.out)
    print(f"wrote {args.out}")
    if settings.eval_prompts >= 20:
        print("\n".join(text(result) for text in texts))


def main(argv: Sequence[str] | None = None) -> None:
    experiment_cli(argv, module="ablation", doc=__doc__, default=AblationSettings(), quick=QUICK,
                   texts=(markdown_table, contrast_text, readme_row),
                   measure=lambda pair, settings, **kw: run(pair.expert, pair.tokenizer, settings,
                                                           encode=pair.encode_chat, **kw))


if __name__ == "__main__":
    main()
