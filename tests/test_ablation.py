"""The head's lesson, isolated (helpers.ablation) on toy sizes: a tiny random teacher, a word tokenizer."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conftest import assert_readme_rows, word_prompts

from helpers import ablation, distill
from helpers.compare import Interval
from helpers.decoding import naive, speculative
from helpers.heads import DraftHead

TOY = ablation.AblationSettings(n_prompts=24, epochs=2.0, draft_vocab=6, eval_prompts=3, eval_tokens=6, gamma=2,
                                cost_prompts=1, timing_repeats=2)


@pytest.fixture(autouse=True)
def toy_training(monkeypatch):
    """Train the toy drafters with toy batch sizes and lengths (the real settings train for minutes)."""
    head, draft = ablation.AblationSettings.head, ablation.AblationSettings.draft
    overrides = dict(batch_size=4, max_new_tokens=6, top_k=3, greedy_every=2, train_batch=4, warmup=2)
    monkeypatch.setattr(ablation.AblationSettings, "head",
                        lambda self: dataclasses.replace(head(self), **overrides, lr=1e-2))
    monkeypatch.setattr(ablation.AblationSettings, "draft",
                        lambda self: dataclasses.replace(draft(self), **overrides,
                                                         student=distill.StudentShape(8, 1, 16, 2, 1)))


def test_both_families_read_the_same_teacher_shards():
    s = ablation.AblationSettings()
    head = s.head().teacher()
    assert all(getattr(s.draft(), key) == getattr(head, key) for key in distill.DATA_KEYS)
    assert s.draft().epochs == s.head().epochs == s.epochs


def test_the_token_only_head_ignores_the_features(teacher):
    head = ablation.TokenOnlyHead.for_expert(teacher, torch.arange(6))
    tokens = torch.tensor([[1, 2, 3]])
    a = head(torch.randn(1, 3, teacher.config.hidden_size), tokens)
    b = head(torch.zeros(1, 3, teacher.config.hidden_size), tokens)
    assert torch.equal(a, b)
    plain = DraftHead.for_expert(teacher, torch.arange(6))
    assert plain.n_parameters == head.n_parameters  # the same layer: the same cost


def test_the_trimmed_readout_is_the_full_readout_restricted_to_v_draft(teacher):
    vocab = torch.tensor([1, 4, 5, 9])
    full = distill.make_student(teacher, distill.StudentShape(8, 1, 16, 2, 1)).eval()
    trimmed = ablation.trimmed_student(teacher, distill.StudentShape(8, 1, 16, 2, 1), vocab).eval()
    ids = torch.tensor([[2, 3, 4]])
    a, b = full(ids).logits, trimmed(ids).logits
    assert b.shape == a.shape
    torch.testing.assert_close(b[..., vocab], a[..., vocab])
    outside = torch.ones(a.shape[-1], dtype=torch.bool).index_fill(0, vocab, False)
    assert torch.isneginf(b[..., outside]).all()


def test_the_trimmed_draft_is_exact_in_speculative_decoding(teacher):
    """q = 0 outside V_draft changes nothing about exactness: greedy output = the expert's greedy output."""
    trimmed = ablation.trimmed_student(teacher, distill.StudentShape(8, 1, 16, 2, 1), torch.tensor([0, 2, 3, 7])).eval()
    ids = torch.tensor([[2, 3, 4]])
    run = speculative(teacher, trimmed, ids, max_new_tokens=8, gamma=3, temperature=0.0)
    assert run.new_token_ids == naive(teacher, ids, max_new_tokens=8, temperature=0.0).new_token_ids
    assert all(t in (0, 2, 3, 7) for it in run.trace for t in it.draft)


def test_the_trimmed_loss_drops_targets_outside_v_draft(teacher):
    vocab = torch.tensor([2, 3, 4])
    draft = ablation.trimmed_student(teacher, distill.StudentShape(8, 1, 16, 2, 1), vocab)
    example = distill.Example(torch.tensor([1, 2, 3, 9]), 0, torch.tensor([[2, 9], [3, 4], [9, 10]]),
                              torch.log(torch.tensor([[0.5, 0.3], [0.6, 0.2], [0.7, 0.1]])))
    loss, parts = ablation.trimmed_loss(draft, [example], pad_id=0, ce_weight=0.0)
    logq = torch.log_softmax(draft.lm_head.trimmed(draft.model(example.tokens[None]).last_hidden_state[0, :3]), -1)
    # position 0: the target is token 2 alone (9 is outside); position 1: 3 and 4 renormalised; position 2 skipped
    expected = -(logq[0, 0] + 0.75 * logq[1, 1] + 0.25 * logq[1, 2]) / 2
    torch.testing.assert_close(loss, expected)
    assert set(parts) == {"soft", "hard", "top1"}
    with pytest.raises(TypeError, match="trimmed_student"):
        ablation.trimmed_loss(distill.make_student(teacher, distill.StudentShape(8, 1, 16, 2, 1)), [example], 0, 0.0)


def test_pipeline_end_to_end(teacher, tokenizer, tmp_path, one_thread):
    prompt_file, eval_file = tmp_path / "train.txt", tmp_path / "eval.txt"
    prompt_file.write_text("\n".join(word_prompts(24, seed=1)) + "\n")
    eval_file.write_text("w1 w2 w3\nw4 w5\nw6 w7 w8\n")
    encode = lambda text: tokenizer(text, return_tensors="pt").input_ids  # noqa: E731
    result = ablation.run(teacher, tokenizer, TOY, work=tmp_path / "work", encode=encode, prompts_file=prompt_file,
                          eval_file=eval_file, command="python -m helpers.ablation --toy", progress=False)
    assert list(result["drafters"]) == list(ablation.DRAFTERS)
    for name, d in result["drafters"].items():
        assert len(d["runs"]["sampled"]) == len(d["runs"]["greedy"]) == 3
        assert len(d["c"]) == 1 and d["c"][0] > 0
        assert d["readout_rows"] == (teacher.config.vocab_size if name == "draft" else 6)
    greedy_texts = {tuple(tuple(r["tokens"]) for r in d["runs"]["greedy"]) for d in result["drafters"].values()}
    assert len(greedy_texts) == 1  # every drafter writes the expert's greedy text
    assert 0 < result["coverage"]["held_out"] <= 1
    with pytest.raises(ValueError, match="other settings"):
        ablation.run(teacher, tokenizer, dataclasses.replace(TOY, epochs=3.0), work=tmp_path / "work", encode=encode,
                     prompts_file=prompt_file, eval_file=eval_file, progress=False)


def test_summary_and_table_from_records():
    def runs(alphas):
        return [{"alpha": a, "rounds": [[2, 1], [2, 2]], "tokens": [1, 2, 3], "expert_calls": 2} for a in alphas]

    drafters = {name: {"parameters": 1_000_000, "readout_rows": 6, "c": [0.1, 0.2, 0.3],
                       "runs": {"sampled": runs([0.5 + 0.01 * i] * 20), "greedy": runs([0.4] * 20)}}
                for i, name in enumerate(ablation.DRAFTERS)}
    drafters["token-only head"]["runs"]["sampled"][0]["alpha"] = None  # judged nothing: left out of the pairs
    s = ablation.summary({"drafters": drafters})
    assert s["drafters"]["head"]["c"] == 0.2 and s["drafters"]["head"]["tokens_per_call"] == 1.5
    assert s["drafters"]["head"]["alpha_by_depth"] == [1.0, 0.5]
    features = s["contrasts"]["features"]["alpha"]
    assert isinstance(features, Interval) and features.n == 19
    assert features.mean == pytest.approx(-0.01)
    table = ablation.markdown_table({"drafters": drafters})
    assert table.count("\n") == 1 + len(ablation.DRAFTERS)
    assert "| head | f_t, x_{t+1} | 6 | 1.0M | 0.200 | 0.500 [0.500, 0.500] |" in table
    assert "features (head − token-only head): α -0.010" in ablation.contrast_text({"drafters": drafters})
    row = ablation.readme_row({"drafters": drafters, "settings": dataclasses.asdict(ablation.AblationSettings()),
                               "machine": {"cpu_kind": "CPU"}, "command": "python -m helpers.ablation"})
    assert row.startswith("| **the head's lesson, isolated**") and row.endswith("| `python -m helpers.ablation` |")
    assert "features (head − token-only head): α -0.010 [-0.010, -0.010] at 1.00× the c" in row


def test_the_readme_holds_the_committed_runs_rows():
    assert_readme_rows("ablation-*.json", ablation.readme_row)


def test_the_command_line_asks_for_an_output(capsys):
    with pytest.raises(SystemExit):
        ablation.main([])
    assert "--out" in capsys.readouterr().err
