"""What moves the head's α (helpers.head_levers) on toy sizes: a tiny random teacher, a word tokenizer."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest
import torch
from conftest import assert_readme_rows, tiny_llama, word_prompts

from helpers import ablation, head_levers
from helpers.compare import Interval
from helpers.heads import DraftHead

TOY = head_levers.LeverSettings(n_prompts=24, epochs=2.0, draft_vocab=6, eval_prompts=3, eval_tokens=6, gamma=2,
                                long_epochs=3.0)
TEMPLATE = "{% for m in messages %}w9 {{ m['content'] }} {% endfor %}{% if add_generation_prompt %}w8 {% endif %}"
"""A toy chat template in the word tokenizer's vocabulary: w9 before the user's words, w8 where the answer starts."""


@pytest.fixture(scope="module")
def teacher():
    """A toy teacher deep enough for three different fused layers (2, 2 and f)."""
    return tiny_llama(3, layers=4)


@pytest.fixture(autouse=True)
def toy_training(monkeypatch):
    """Train the toy heads with toy batch sizes and lengths (the real settings train for minutes)."""
    head = ablation.AblationSettings.head
    overrides = dict(batch_size=4, max_new_tokens=6, top_k=3, greedy_every=2, train_batch=4, warmup=2)
    monkeypatch.setattr(ablation.AblationSettings, "head",
                        lambda self: dataclasses.replace(head(self), **overrides, lr=1e-2))


@pytest.fixture
def chat_tokenizer(tokenizer):
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = TEMPLATE
    return tok


def test_the_recipe_is_the_ablations_and_the_long_run_the_committed_heads_epochs():
    settings = head_levers.LeverSettings()
    recipe, default = settings.recipe(), ablation.AblationSettings()
    assert dataclasses.asdict(recipe) == dataclasses.asdict(default)
    assert settings.recipe(settings.long_epochs).head().epochs == settings.long_epochs
    assert settings.long_epochs == head_levers.committed_training()["epochs"]
    assert head_levers.committed_training()["steps"] == 1 < settings.ttt_steps, "the committed head is EAGLE-1's"


def test_chat_texts_are_what_encode_chat_tokenizes(chat_tokenizer, tokenizer):
    assert head_levers.chat_texts(chat_tokenizer, ["w1 w2"]) == ["w9 w1 w2 w8 "]
    with pytest.raises(ValueError, match="chat template"):
        head_levers.chat_texts(tokenizer, ["w1"])


def test_pipeline_end_to_end(teacher, chat_tokenizer, tmp_path, one_thread):
    prompt_file, eval_file = tmp_path / "train.txt", tmp_path / "eval.txt"
    prompt_file.write_text("\n".join(word_prompts(24, seed=1)) + "\n")
    eval_file.write_text("w1 w2 w3\nw4 w5\nw6 w7 w8\n")
    encode = lambda text: chat_tokenizer(head_levers.chat_texts(chat_tokenizer, [text])[0],  # noqa: E731
                                         return_tensors="pt").input_ids
    committed = DraftHead.for_expert(teacher, torch.arange(6), seed=3).eval()
    record = {"n_prompts": 96, "epochs": 8.0, "steps": 1, "feature_layers": [-1], "train_positions": 500,
              "answer_tokens": None, "coverage_valid": 0.9}
    result = head_levers.run(teacher, chat_tokenizer, TOY, work=tmp_path / "work", encode=encode, committed=committed,
                             committed_record=record, prompts_file=prompt_file, eval_file=eval_file,
                             command="python -m helpers.head_levers --toy", progress=False)
    assert list(result["heads"]) == list(head_levers.HEADS)
    work = tmp_path / "work"
    assert {p.name for p in (work / "raw").iterdir()} >= {"teacher", "features", "features-fused", "head-2-epochs",
                                                          "head-3-epochs", "head-2-epochs-2-steps",
                                                          "head-2-epochs-fused", "head-2-epochs-fused-2-steps"}
    assert (work / "chat" / "head-2-epochs").is_dir() and not (work / "chat" / "head-3-epochs").exists()
    for name, h in result["heads"].items():
        assert len(h["runs"]["sampled"]) == len(h["runs"]["greedy"]) == 3
        assert h["readout_rows"] == 6 and 0 < h["coverage_held_out"] <= 1
        assert h["n_prompts"] == (96 if name == "committed" else 24)
    assert [(result["heads"][n]["epochs"], result["heads"][n]["steps"], result["heads"][n]["feature_layers"])
            for n in head_levers.HEADS] == [(2.0, 1, [-1]), (3.0, 1, [-1]), (2.0, 2, [-1]), (2.0, 1, [2, 2, -1]),
                                            (2.0, 2, [2, 2, -1]), (2.0, 1, [-1]), (8.0, 1, [-1])]
    greedy_texts = {tuple(tuple(r["tokens"]) for r in h["runs"]["greedy"]) for h in result["heads"].values()}
    assert len(greedy_texts) == 1  # every head writes the expert's greedy text
    first_chat = torch.load(next((tmp_path / "work" / "chat" / "teacher").glob("teacher-*.pt")))
    assert (first_chat["sequences"] == chat_tokenizer.convert_tokens_to_ids("w9")).any(dim=1).all()
    json.dumps(result)  # the record is plain JSON
    with pytest.raises(ValueError, match="other settings"):
        head_levers.run(teacher, chat_tokenizer, dataclasses.replace(TOY, epochs=3.0), work=tmp_path / "work",
                        encode=encode, committed=committed, committed_record=record, prompts_file=prompt_file,
                        eval_file=eval_file, progress=False)


def test_summary_table_and_row_from_records():
    def runs(alphas):
        return [{"alpha": a, "rounds": [[2, 1], [2, 2]], "tokens": [1, 2, 3], "expert_calls": 2} for a in alphas]

    heads = {name: {"n_prompts": 1024, "epochs": 4.0, "steps": 1, "train_positions": 1000, "answer_tokens": 900,
                    "coverage_held_out": 0.8, "feature_layers": [2, 15, -1] if "fused" in name else [-1],
                    "runs": {"sampled": runs([0.2 + 0.1 * i] * 20), "greedy": runs([0.3 + 0.1 * i] * 20)}}
             for i, name in enumerate(head_levers.HEADS)}
    heads["raw prompts"]["runs"]["greedy"][0]["alpha"] = None  # judged nothing: left out of the pairs
    s = head_levers.summary({"heads": heads})
    fmt = s["levers"]["format"]
    assert isinstance(fmt["alpha"], Interval) and fmt["alpha"].n == 20 and fmt["agreement"].n == 19
    assert fmt["alpha"].mean == pytest.approx(0.5) and s["levers"]["epochs"]["alpha"].mean == pytest.approx(0.1)
    assert s["levers"]["data"]["alpha"].mean == pytest.approx(0.5)
    assert s["levers"]["training-time test"]["alpha"].mean == pytest.approx(0.2)
    assert s["levers"]["fused features (one draft step)"]["alpha"].mean == pytest.approx(0.3)
    assert s["levers"]["fused features (both with the training-time test)"]["alpha"].mean == pytest.approx(0.2)
    assert s["levers"]["fused features and the training-time test together"]["alpha"].mean == pytest.approx(0.4)
    assert s["heads"]["committed"]["tokens_per_call"] == 1.5
    table = head_levers.markdown_table({"heads": heads})
    assert table.count("\n") == 1 + len(head_levers.HEADS)
    assert ("| chat requests | answers to chat requests | f | 1,024 × 4 (1) | 1,000 (900) | 80.0% | "
            "0.700 [0.700, 0.700] |") in table
    assert f"| {head_levers.FUSED} | continuations of raw prompts | layers 2, 15 and f | 1,024 × 4 (1) |" in table
    text = head_levers.lever_text({"heads": heads})
    assert text.startswith("format (chat requests − raw prompts): α +0.500 [+0.500, +0.500]")
    row = head_levers.readme_row({"heads": heads, "settings": dataclasses.asdict(head_levers.LeverSettings()),
                                  "machine": {"cpu_kind": "CPU"}, "command": "python -m helpers.head_levers"})
    assert row.startswith("| **what moves the head's α**") and row.endswith("| `python -m helpers.head_levers` |")
    assert "data (committed − raw prompts, more epochs): α +0.500 [+0.500, +0.500]" in row


def test_the_readme_holds_the_committed_runs_rows():
    assert_readme_rows("head-levers-*.json", head_levers.readme_row)


def test_the_command_line_asks_for_an_output(capsys):
    with pytest.raises(SystemExit):
        head_levers.main([])
    assert "--out" in capsys.readouterr().err
