"""The training loop shared by the distilled draft (:mod:`helpers.distill`, notebook 05) and the draft head
(:mod:`helpers.train_head`, notebook 07): AdamW with linear warm-up and cosine decay, a fresh shuffle per epoch,
gradient clipping, a validation entry in the log every few hundred steps, and a checkpoint that a rerun resumes."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import torch
from tqdm.auto import tqdm

Item = TypeVar("Item")
LossFn = Callable[[list[Item]], tuple[torch.Tensor, dict[str, float]]]


def warmup_cosine(step: int, warmup: int, total: int) -> float:
    """The learning-rate factor at ``step``: linear from 1/warmup to 1 over ``warmup`` steps, then a cosine to 0."""
    if step < warmup:
        return (step + 1) / warmup
    return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))


def fit(model: torch.nn.Module, items: Sequence[Item], loss: LossFn, validate: Callable[[], dict[str, float]],
        folder: Path, *, epochs: float, batch: int, lr: float, warmup: int, weight_decay: float, seed: int,
        desc: str, progress: bool = True) -> list[dict]:
    """Train ``model`` on ``items`` for ``epochs`` epochs of ``batch`` items; returns the log.

    ``loss(batch_items)`` returns the loss and a dict of parts (``top1`` is shown on the progress bar);
    ``validate()`` the held-out numbers logged as ``valid_*`` every ``min(200, total // 10)`` steps and at the end,
    when ``folder/checkpoint.pt`` is written too. A rerun with the same settings and more epochs resumes from it.
    """
    folder.mkdir(parents=True, exist_ok=True)
    per_epoch = math.ceil(len(items) / batch)
    total = max(1, round(epochs * per_epoch))
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=lr, betas=(0.9, 0.95), weight_decay=weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: warmup_cosine(step, warmup, total))
    checkpoint = folder / "checkpoint.pt"
    step, log, before = 0, [], 0.0
    if checkpoint.exists():
        state = torch.load(checkpoint)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        step, log, before = state["step"], state["log"], state["seconds"]
    start = time.perf_counter()
    every = max(1, min(200, total // 10))
    bar = tqdm(total=total, initial=step, desc=desc, unit="step", disable=not progress)
    model.train()
    while step < total:
        order = random.Random(seed * 7919 + step // per_epoch).sample(range(len(items)), len(items))
        offset = (step % per_epoch) * batch
        value, parts = loss([items[i] for i in order[offset:offset + batch]])
        optimizer.zero_grad(set_to_none=True)
        value.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()
        scheduler.step()
        step += 1
        bar.update()
        bar.set_postfix(loss=f"{value.item():.3f}", top1=f"{parts.get('top1', math.nan):.2f}")
        if step % every == 0 or step == total:
            log.append({"step": step, "epoch": step / per_epoch, "train_loss": value.item(), **parts,
                        **{f"valid_{k}": v for k, v in validate().items()},
                        "seconds": before + time.perf_counter() - start})
            tmp = checkpoint.with_suffix(".tmp")
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "scheduler": scheduler.state_dict(), "step": step, "log": log,
                        "seconds": before + time.perf_counter() - start}, tmp)
            tmp.rename(checkpoint)
    bar.close()
    model.eval()
    return log
