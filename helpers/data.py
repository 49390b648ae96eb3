"""The files in ``data/`` and how to read them (see data/README.md for what each one is).

Every path is resolved from this package, never from the working directory: a notebook finds its data whether the
kernel starts in ``notebooks/`` (JupyterLab), in the repository (papermill, nbval) or in ``/content`` (Colab).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "data"
ARTICLE_PROMPTS = DATA / "article_prompts.txt"
"""The source article's five prompts (notebooks 01-04, ``helpers.bench``)."""
PROMPTS = DATA / "prompts.txt"
"""60 held-out open-ended prompts (notebook 04, ``helpers.quality``, the draft's evaluation)."""
EVAL_PROMPTS = DATA / "eval_prompts.txt"
"""50 chat-style requests (code, emails, how-to, lists, explanations, summaries of a given text) held out by
construction: no topic, head noun or template of the training prompts (tested). For speed and acceptance numbers,
with the chat template and EOS on."""
GROUNDED_PROMPTS = DATA / "grounded_prompts.txt"
"""40 input-grounded requests (code to edit, text to rewrite, quote, extract from or condense), held out as
:data:`EVAL_PROMPTS` is (tested): the workload where prompt lookup drafts by copying (notebook 06)."""
DISTILL_PROMPTS = DATA / "distill_prompts.txt"
"""5,147 training prompts for the distilled draft (``helpers.distill``), disjoint from the held-out ones."""
PASSAGE = DATA / "passage.txt"
"""A short text for notebook 06's input-grounded tasks (prompt lookup)."""
DRAFT_FOLDER = DATA / "pocket-draft"
"""The draft distilled from the pocket expert by ``python -m helpers.distill`` (notebook 05)."""
DRAFT_CARD = DRAFT_FOLDER / "card.json"
"""The distilled draft's measurements (model card data: held-out α, c, the learning curve; notebooks 05, 06)."""
HEAD_FOLDER = DATA / "pocket-head"
"""The EAGLE-style draft head for the pocket expert, trained by ``python -m helpers.train_head`` (notebook 07)."""
HEAD_CARD = HEAD_FOLDER / "card.json"
"""The draft head's measurements (held-out α, c with and without the trimmed vocabulary, the learning curve)."""
RESULTS = DATA / "results"
"""The committed results of the full benchmark and quality runs, each JSON holding the command that made it."""

GROUNDED_TASKS = {
    "summarise": "Summarise this text in two sentences.\n\n{passage}",
    "quote": "{passage}\n\nQuote the sentence of the text that explains what the keeper did on foggy nights.",
    "edit": "Rewrite the following text, replacing every 'keeper' with 'guardian'. Keep everything else the same."
            "\n\n{passage}",
}
"""Notebook 06: tasks whose answers copy from their input, the case where prompt lookup drafts well."""


def read_prompts(path: Path | str, limit: int | None = None) -> list[str]:
    r"""One prompt per line, blank lines skipped; a literal ``\n`` inside a line is a newline.

    ``limit`` keeps the first prompts; asking for more than the file has is an error (nothing is silently cut).
    """
    path = Path(path)
    prompts = [line.replace("\\n", "\n") for line in path.read_text().splitlines() if line.strip()]
    if not prompts:
        raise ValueError(f"{path} holds no prompts (one per line)")
    if limit is not None:
        if not 1 <= limit <= len(prompts):
            raise ValueError(f"asked for {limit} prompts but {path} has {len(prompts)}: use 1..{len(prompts)}")
        prompts = prompts[:limit]
    return prompts


def result_path(name: Path | str) -> Path:
    """A committed result by file name (``"bench-pocket-xeon.json"`` is ``data/results/bench-pocket-xeon.json``).

    An absolute path is taken as it is, so a notebook parameter can point at a result you produced yourself.
    """
    path = Path(name)
    if not path.is_absolute():
        if len(path.parts) != 1:
            raise ValueError(f"{name!r}: give a file name in {RESULTS} or an absolute path (relative paths would "
                             "depend on the working directory)")
        path = RESULTS / path
    if not path.is_file():
        known = ", ".join(sorted(p.name for p in RESULTS.glob("*.json")))
        raise FileNotFoundError(f"{path} does not exist; committed results: {known}")
    return path


def read_json(name: Path | str) -> dict:
    """A committed result (see :func:`result_path`) or another JSON file given by absolute path, parsed."""
    path = Path(name)
    return json.loads((path if path.is_absolute() else result_path(path)).read_text())


def _json_safe(value: object) -> object:
    """NaN and ±inf become null (strict JSON); tuples become lists."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def write_json(result: dict, path: Path | str) -> Path:
    """Write a result as strict JSON (NaN and infinities as null), creating the folder; return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_json_safe(result), indent=2, ensure_ascii=False, allow_nan=False) + "\n")
    return path


def grounded_tasks() -> dict[str, str]:
    """Notebook 06's input-grounded instructions (summarise, quote, edit) with the passage filled in."""
    passage = PASSAGE.read_text().strip()
    return {name: template.format(passage=passage) for name, template in GROUNDED_TASKS.items()}
