"""Which lever moves the draft head's α on held-out requests (notebook 07, section 5):
``python -m helpers.head_levers --out data/results/head-levers-<cpu>.json``

The committed head (:mod:`helpers.train_head`) learned from the expert's continuations of raw prompts ("The history
of the printing press begins"), while a user, and the held-out evaluation, sends chat requests, which the expert
answers after its chat template in another register (greetings, lists, code). Five levers, each measured as a
paired difference over the same held-out requests (seven differences: the fused features' three):

- **format**: two heads trained by one recipe (the ablation's, :class:`helpers.ablation.AblationSettings`: the first
  ``n_prompts`` lines of ``data/distill_prompts.txt``, the same epochs, split and seed, a V_draft of the same size
  taken from each head's own data), one on the expert's continuations of the raw prompts, one on its answers to the
  same lines sent as chat requests (chat template, EOS on: the text a user gets). The topics and templates stay the
  training grid's, so the evaluation requests stay held out;
- **epochs**: the raw-prompt head of this recipe trained again, from the same initial weights, for ``long_epochs``
  (by default the committed head's);
- **data**: that head against the committed head, trained on more prompts for the same epochs (so also on more
  training steps; its card holds the numbers);
- **training-time test**: the raw-prompt head of this recipe trained again with EAGLE-3's training-time test over
  ``ttt_steps`` draft steps (:func:`helpers.train_head.head_loss`), the same data and epochs;
- **fused features**, without and with the training-time test: the raw-prompt heads of this recipe (one draft step;
  ``ttt_steps``) with EAGLE-3's fused input (:class:`helpers.heads.DraftHead`: the expert's low and middle layers
  beside f, :func:`helpers.heads.fused_layers`), from the same initial weights plus W_g, against the heads that
  read f alone, trained the same way; and the fused head with the test against the head with neither (EAGLE-3's
  two input-side changes together against EAGLE-1's head).

Measured like the ablation (:func:`helpers.ablation.acceptance`): α at T = 1 and the greedy agreement prompt by
prompt, with 95 % intervals over prompts, α by depth, tokens per expert call, and how much of the expert's held-out
greedy text each head's V_draft covers. The heads have one shape and one V_draft size, so one cost c per draft
step, but for the fused heads' W_g, which runs once a round, on the features the expert verified (not timed here).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from helpers import ablation, distill, train_head
from helpers.data import DISTILL_PROMPTS, EVAL_PROMPTS, HEAD_FOLDER, read_json, read_prompts
from helpers.heads import DraftHead, fused_layers, load_head
from helpers.machine import machine_info

TTT = "raw prompts, training-time test"
FUSED, FUSED_TTT = "raw prompts, fused features", "raw prompts, fused features, training-time test"
HEADS = ("raw prompts", "raw prompts, more epochs", TTT, FUSED, FUSED_TTT, "chat requests", "committed")
RAW, CHAT = "continuations of raw prompts", "answers to chat requests"
TEACHER_TEXT = {"raw prompts": RAW, "raw prompts, more epochs": RAW, TTT: RAW, FUSED: RAW, FUSED_TTT: RAW,
                "chat requests": CHAT, "committed": RAW}
CONTRASTS = {"format": ("chat requests", "raw prompts"), "epochs": ("raw prompts, more epochs", "raw prompts"),
             "data": ("committed", "raw prompts, more epochs"), "training-time test": (TTT, "raw prompts"),
             "fused features (one draft step)": (FUSED, "raw prompts"),
             "fused features (both with the training-time test)": (FUSED_TTT, TTT),
             "fused features and the training-time test together": (FUSED_TTT, "raw prompts")}
"""What each pair of heads isolates: (with, without)."""


@dataclass
class LeverSettings:
    """Everything that determines a run (stored in the result file); the defaults are the ablation's."""

    n_prompts: int = 1024
    epochs: float = 4.0
    draft_vocab: int = 8192
    eval_prompts: int = 24
    eval_tokens: int = 48
    gamma: int = 3
    seed: int = 0
    long_epochs: float = 8.0
    """The epochs lever's second raw-prompt head: the committed head's epochs, so that the data lever holds them."""
    ttt_steps: int = 2
    """The draft steps the training-time test lever's head is trained over (the others: 1, EAGLE-1)."""

    def recipe(self, epochs: float | None = None) -> ablation.AblationSettings:
        """The ablation's settings with these values (its teacher data and the head's training settings)."""
        values = {k: v for k, v in asdict(self).items() if k not in ("long_epochs", "ttt_steps")}
        return ablation.AblationSettings(**{**values, "epochs": self.epochs if epochs is None else epochs})


QUICK = LeverSettings(n_prompts=64, epochs=1.0, draft_vocab=2048, eval_prompts=2, eval_tokens=12, long_epochs=2.0,
                      ttt_steps=2)
"""``--quick``: every stage in a few minutes (no interval: too few prompts)."""


def chat_texts(tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str]) -> list[str]:
    """Each prompt as a user message in the tokenizer's chat template, ending where the answer starts (the text
    whose ids :meth:`helpers.models.Pair.encode_chat` returns)."""
    if tokenizer.chat_template is None:
        raise ValueError("this tokenizer has no chat template: the format lever needs one (use the pocket pair)")
    return [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
            for p in prompts]


def train_heads(expert: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, texts: Sequence[str],
                settings: LeverSettings, work: Path, variants: Sequence[tuple[float, int, bool]], *,
                progress: bool = True) -> list[tuple[DraftHead, dict]]:
    """Teacher data (:func:`helpers.ablation.teacher_data`, with the fused features if a variant needs them) and
    V_draft, then one head per (epochs, draft steps trained, fused) in ``variants`` (:func:`helpers.train_head.train`,
    each from the same initial weights, in ``work/head-<epochs>-epochs[-fused][-<steps>-steps]``), all resumable;
    returns each head and its training record (the data stage's seconds are this call's: a resumed stage only loads;
    the training seconds are the checkpoint's)."""
    start = time.perf_counter()
    data = {fused: ablation.teacher_data(expert, tokenizer, settings.recipe(), work, texts,
                                         feature_layers=fused_layers(expert) if fused else (-1,), progress=progress)
            for fused in sorted({fused for _, _, fused in variants})}
    seconds_data = time.perf_counter() - start
    out = []
    for e, steps, fused in variants:
        d = data[fused]
        head = DraftHead.for_expert(expert, d.vocab, seed=settings.seed,
                                    feature_layers=fused_layers(expert) if fused else (-1,))
        folder = work / (f"head-{e:g}-epochs" + ("-fused" if fused else "") + (f"-{steps}-steps" if steps > 1 else ""))
        log = train_head.train(head, d.train_sequences, d.valid_sequences, folder,
                               dataclasses.replace(settings.recipe(e).head(), steps=steps, fused=fused),
                               progress=progress)
        out.append((head.eval(), {"n_prompts": settings.n_prompts, "epochs": e, "steps": steps,
                                  "feature_layers": list(head.feature_layers),
                                  "train_positions": sum(len(s.tokens) - 1 for s in d.train_sequences),
                                  "answer_tokens": distill.count_tokens(d.train_examples),
                                  "coverage_valid": train_head.coverage(d.valid_sequences, d.vocab),
                                  "seconds": {"data": seconds_data, "train": log[-1]["seconds"] if log else 0.0}}))
    return out


def committed_training(folder: Path = HEAD_FOLDER) -> dict:
    """The committed head's training record, from its card (its ``train_tokens`` counts every position of the training
    sequences, prompt tokens included, as :func:`train_heads` does)."""
    card = read_json(folder / "card.json")
    return {"n_prompts": card["settings"]["n_prompts"], "epochs": card["settings"]["epochs"],
            "steps": card["settings"]["steps"], "feature_layers": [-1],
            "train_positions": card["train_tokens"], "answer_tokens": None, "coverage_valid": card["coverage_valid"]}


def run(expert: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, settings: LeverSettings, *, work: Path,
        encode: Callable[[str], torch.Tensor], committed: DraftHead, committed_record: dict,
        prompts_file: Path = DISTILL_PROMPTS, eval_file: Path = EVAL_PROMPTS, command: str = "",
        progress: bool = True) -> dict:
    """The trained heads (resumable in ``work``), then every head on the held-out requests (``encode`` turns one
    into prompt ids: the chat template)."""
    ablation.claim_work(work, {k: v for k, v in asdict(settings).items()
                               if k in ("n_prompts", "epochs", "draft_vocab", "seed")})
    prompts = read_prompts(prompts_file, settings.n_prompts)
    (raw, raw_long, raw_ttt, fused, fused_ttt), (chat,) = (
        train_heads(expert, tokenizer, prompts, settings, work / "raw",
                    ((settings.epochs, 1, False), (settings.long_epochs, 1, False),
                     (settings.epochs, settings.ttt_steps, False), (settings.epochs, 1, True),
                     (settings.epochs, settings.ttt_steps, True)),
                    progress=progress),
        train_heads(expert, tokenizer, chat_texts(tokenizer, prompts), settings, work / "chat",
                    ((settings.epochs, 1, False),), progress=progress))
    trained = {"raw prompts": raw, "raw prompts, more epochs": raw_long, TTT: raw_ttt, FUSED: fused,
               FUSED_TTT: fused_ttt, "chat requests": chat, "committed": (committed, committed_record)}
    heads, training = {n: h for n, (h, _) in trained.items()}, {n: r for n, (_, r) in trained.items()}
    requests = [encode(p) for p in read_prompts(eval_file, settings.eval_prompts)]
    start = time.perf_counter()
    runs = ablation.acceptance(ablation.decoders(expert, {name: heads[name] for name in HEADS}, gamma=settings.gamma,
                                                 max_new_tokens=settings.eval_tokens,
                                                 eos_token_id=tokenizer.eos_token_id),
                               requests, seed=settings.seed, progress=progress)
    return {"settings": asdict(settings), "command": command, "machine": machine_info(expert.device),
            "seconds_acceptance": time.perf_counter() - start,
            "heads": {name: {**training[name], "readout_rows": len(heads[name].vocab),
                             "coverage_held_out": ablation.held_out_coverage(runs[name]["greedy"], heads[name].vocab),
                             "runs": runs[name]}
                      for name in HEADS}}


# --------------------------------------------------------------------------------------------- summary
DATA_KEYS = ("n_prompts", "epochs", "steps", "feature_layers", "train_positions", "answer_tokens", "coverage_held_out")
"""What a head's row says about its training data."""


def summary(result: dict) -> dict:
    """Per head: :func:`helpers.ablation.acceptance_summary` and its data; per lever: the paired differences."""
    heads = {name: {**ablation.acceptance_summary(h["runs"]),
                    **{k: h[k] for k in DATA_KEYS}}
             for name, h in result["heads"].items()}
    levers = {name: ablation.paired(result["heads"][a]["runs"], result["heads"][b]["runs"])
              for name, (a, b) in CONTRASTS.items()}
    return {"heads": heads, "levers": levers}


def markdown_table(result: dict) -> str:
    """One row per head: its teacher text, the expert's layers it reads, data (training positions: every position of
    the training sequences, prompt tokens included: the head learns at each; of them the expert's answer tokens, not
    in the committed head's card), V_draft's held-out coverage, α, agreement, α by depth, tokens per expert call."""
    lines = ["| head | teacher text | reads | prompts × epochs (draft steps trained) | training positions (of them "
             "answers) | V_draft covers (held-out) | α (T = 1) | greedy agreement | α by depth 1, 2, 3 (T = 1) | "
             "tokens per expert call |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, h in summary(result)["heads"].items():
        depth = ", ".join(f"{a:.2f}" for a in h["alpha_by_depth"][:3])
        answers = "–" if h["answer_tokens"] is None else f"{h['answer_tokens']:,}"
        lines.append(f"| {name} | {TEACHER_TEXT[name]} | {reads(h['feature_layers'])} | "
                     f"{h['n_prompts']:,} × {h['epochs']:g} ({h['steps']}) | "
                     f"{h['train_positions']:,} ({answers}) | {h['coverage_held_out']:.1%} | "
                     f"{ablation.interval_cell(h['alpha'])} | {ablation.interval_cell(h['agreement'])} | {depth} | "
                     f"{h['tokens_per_call']:.2f} |")
    return "\n".join(lines)


def reads(layers: Sequence[int]) -> str:
    """The expert's hidden states a head reads, in words: f, or the fused layers' outputs and f."""
    return "f" if list(layers) == [-1] else "layers " + ", ".join(map(str, layers[:-1])) + " and f"


def lever_text(result: dict) -> str:
    """Each lever in words, with its paired intervals over requests."""
    return "\n".join(f"{name} ({a} − {b}): α {ablation.difference_cell(v['alpha'])}, greedy agreement "
                     f"{ablation.difference_cell(v['agreement'])} over {v['alpha'].n} requests"
                     for (name, v), (a, b) in zip(summary(result)["levers"].items(), CONTRASTS.values(), strict=True))


def readme_row(result: dict) -> str:
    """The README's row for a result file (a test checks that the README holds it verbatim)."""
    st, s = result["settings"], summary(result)
    what = (f"**what moves the head's α** (notebook 07; heads of one shape trained by the ablation's recipe on the "
            f"expert's continuations of {st['n_prompts']:,} raw training prompts ({st['epochs']:g} and "
            f"{st['long_epochs']:g} epochs; {st['epochs']:g} epochs with EAGLE-3's training-time test over "
            f"{st['ttt_steps']} draft steps; {st['epochs']:g} epochs reading EAGLE-3's fused features, without and "
            f"with that test) or its answers to the same lines as chat requests ({st['epochs']:g} "
            f"epochs), and the committed head; {st['eval_prompts']} held-out chat requests, chat template, EOS on, "
            f"up to {st['eval_tokens']} tokens, γ = {st['gamma']}; one run; [95 % CI over requests])")
    heads = "; ".join(f"{name}: α {ablation.interval_cell(h['alpha'])}, agreement "
                      f"{ablation.interval_cell(h['agreement'])}" for name, h in s["heads"].items())
    levers = "; ".join(f"{name} ({a} − {b}): α {ablation.difference_cell(v['alpha'])}"
                       for (name, v), (a, b) in zip(s["levers"].items(), CONTRASTS.values(), strict=True))
    return f"| {what} | {result['machine']['cpu_kind']} | {heads} — {levers} | `{result['command']}` |"


def main(argv: Sequence[str] | None = None) -> None:
    ablation.experiment_cli(argv, module="head_levers", doc=__doc__, default=LeverSettings(), quick=QUICK,
                            texts=(markdown_table, lever_text, readme_row),
                            measure=lambda pair, settings, **kw: run(
                                pair.expert, pair.tokenizer, settings, encode=pair.encode_chat,
                                committed=load_head(pair.expert), committed_record=committed_training(), **kw))


if __name__ == "__main__":
    main()
