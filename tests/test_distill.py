"""The distillation pipeline (helpers.distill) end to end on toy sizes: a tiny random teacher, a word tokenizer."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from conftest import word_prompts

from helpers import distill
from helpers.data import DRAFT_CARD, DRAFT_FOLDER
from helpers.decoding import naive
from helpers.models import distilled_draft

SHAPE = distill.StudentShape(hidden=8, layers=1, intermediate=16, heads=2, kv_heads=1)


def toy_settings(**overrides) -> distill.Settings:
    settings = distill.Settings(n_prompts=12, batch_size=4, max_new_tokens=6, top_k=3, greedy_every=2,
                                student=copy.deepcopy(SHAPE), epochs=2.0, train_batch=4, warmup=2, eval_prompts=3,
                                eval_tokens=5, eval_gamma=2, timing_repeats=2, autocast=False)
    for name, value in overrides.items():
        setattr(settings, name, value)
    return settings


def test_batched_greedy_generation_equals_one_prompt_at_a_time(teacher, tokenizer, one_thread):
    batch_prompts = word_prompts(4)
    batch = distill.generate_batch(teacher, tokenizer, batch_prompts, max_new_tokens=6, top_k=3, greedy=True,
                                   generator=torch.Generator().manual_seed(0))
    n_prompt = batch["sequences"].shape[1] - batch["generated"].shape[1]
    for row, text in enumerate(batch_prompts):
        ids = tokenizer(text, return_tensors="pt").input_ids
        expected = naive(teacher, ids, max_new_tokens=6, temperature=0,
                         eos_token_id=tokenizer.eos_token_id).new_token_ids
        generated = batch["sequences"][row, n_prompt:][batch["generated"][row]].tolist()
        assert generated == expected
        # the top-1 of the kept distribution is the greedy token, and log-probabilities are sorted
        assert batch["topk_ids"][row, :len(expected), 0].tolist() == expected
    assert (batch["topk_logp"][..., :-1] >= batch["topk_logp"][..., 1:]).all()


def test_generate_resumes_after_the_last_finished_shard(teacher, tokenizer, tmp_path, monkeypatch, one_thread):
    settings = toy_settings()
    shards = distill.generate(teacher, tokenizer, word_prompts(12), tmp_path, settings, progress=False)
    assert len(shards) == 3 and all(s.exists() for s in shards)
    before = torch.load(shards[2])
    shards[1].unlink()
    calls = []
    original = distill.generate_batch
    monkeypatch.setattr(distill, "generate_batch", lambda *a, **k: calls.append(1) or original(*a, **k))
    distill.generate(teacher, tokenizer, word_prompts(12), tmp_path, settings, progress=False)
    assert len(calls) == 1 and shards[1].exists()
    assert torch.equal(torch.load(shards[2])["sequences"], before["sequences"])


def test_examples_align_tokens_with_the_teacher_targets(teacher, tokenizer, tmp_path, one_thread):
    settings = toy_settings(greedy_every=1)  # all greedy: the written token is the teacher's top-1
    shards = distill.generate(teacher, tokenizer, word_prompts(8), tmp_path, settings, progress=False)
    examples = distill.load_examples(shards)
    assert len(examples) == 8
    for e in examples:
        generated = e.tokens[e.first + 1:]
        assert generated.tolist() == e.topk_ids[:, 0].tolist()
        assert (e.tokens != tokenizer.pad_token_id).any()
    assert distill.count_tokens(examples) == sum(len(e.tokens) - e.first - 1 for e in examples)


def test_student_embeddings_are_a_rescaled_pca_of_the_teacher(teacher):
    student = distill.make_student(teacher, SHAPE)
    assert student.config.vocab_size == teacher.config.vocab_size
    assert student.get_input_embeddings().weight is student.get_output_embeddings().weight
    emb = student.get_input_embeddings().weight.detach()
    assert emb.std().item() == pytest.approx(student.config.initializer_range, rel=1e-3)
    teacher_emb = teacher.get_input_embeddings().weight.detach()
    # PCA keeps the teacher's geometry: pairwise similarities correlate strongly
    gram_s, gram_t = emb @ emb.T, (teacher_emb - teacher_emb.mean(0)) @ (teacher_emb - teacher_emb.mean(0)).T
    assert torch.corrcoef(torch.stack([gram_s.flatten(), gram_t.flatten()]))[0, 1] > 0.8
    with pytest.raises(ValueError, match="exceeds the teacher"):
        distill.make_student(teacher, distill.StudentShape(hidden=32, heads=2, kv_heads=1))


def test_training_lowers_the_loss_and_resumes_from_its_checkpoint(teacher, tokenizer, tmp_path, one_thread):
    settings = toy_settings(n_prompts=24, epochs=4.0, lr=1e-2)
    shards = distill.generate(teacher, tokenizer, word_prompts(24), tmp_path / "teacher", settings, progress=False)
    examples = distill.load_examples(shards)
    student = distill.make_student(teacher, settings.student)
    pad = tokenizer.pad_token_id
    loss_before, _ = distill.distillation_loss(student, examples, pad, settings.ce_weight)
    log = distill.train(student, examples[4:], examples[:4], tmp_path / "train", settings, pad, progress=False)
    loss_after, _ = distill.distillation_loss(student, examples, pad, settings.ce_weight)
    assert loss_after < loss_before
    assert log[-1]["step"] == 4 * 5
    assert {"valid_loss", "valid_top1", "valid_mass", "valid_teacher_mass", "seconds"} <= log[-1].keys()
    # a rerun with more epochs continues from the checkpoint instead of starting again
    settings.epochs = 6.0
    again = distill.make_student(teacher, settings.student)
    log2 = distill.train(again, examples[4:], examples[:4], tmp_path / "train", settings, pad, progress=False)
    assert log2[:len(log)] == log and log2[-1]["step"] == 6 * 5


def test_the_rest_bucket_keeps_the_mass_outside_the_top_k():
    logits = torch.randn(5, 40, generator=torch.Generator().manual_seed(0)) * 2
    logp = torch.log_softmax(logits, -1)
    values, ids = logp.topk(4, -1)
    outside = 1 - values.exp().sum(-1)
    target = distill.soft_targets(values, "rest")
    assert target.shape == (5, 5) and torch.allclose(target.sum(-1), torch.ones(5))
    assert torch.allclose(target[:, -1], outside)
    mine = distill.student_log_probs(logp, ids, "rest")
    assert torch.allclose(mine[:, -1].exp(), outside, atol=1e-6)  # log Σ q over the other 36 tokens
    assert torch.allclose(distill.soft_targets(values, "renormalised").sum(-1), torch.ones(5))


def cross_entropy(target_logp, student_logp, ids, loss):
    targets = distill.soft_targets(target_logp, loss)
    return float(-(targets * distill.student_log_probs(student_logp, ids, loss)).sum(-1).mean())


def test_the_renormalised_target_rewards_over_confidence_and_the_rest_bucket_does_not():
    logp = torch.log_softmax(torch.randn(5, 40, generator=torch.Generator().manual_seed(1)), -1)
    values, ids = logp.topk(4, -1)
    honest = logp  # the teacher itself
    confident = torch.full_like(logp, float("-inf")).scatter(1, ids, torch.log_softmax(values, -1))  # top-k only
    assert cross_entropy(values, confident, ids, "renormalised") <= cross_entropy(values, honest, ids,
                                                                                   "renormalised")
    assert cross_entropy(values, honest, ids, "rest") < cross_entropy(values, confident, ids, "rest")


def test_the_loss_is_one_of_two(teacher, tokenizer, tmp_path, one_thread):
    settings = toy_settings()
    shards = distill.generate(teacher, tokenizer, word_prompts(4), tmp_path / "teacher", settings, progress=False)
    examples = distill.load_examples(shards)
    student = distill.make_student(teacher, settings.student)
    for loss in distill.LOSSES:
        value, parts = distill.distillation_loss(student, examples, tokenizer.pad_token_id, 0.3, loss=loss)
        assert torch.isfinite(value) and 0 < parts["mass"] <= 1 and 0 < parts["teacher_mass"] <= 1
    with pytest.raises(ValueError, match="loss must be one of"):
        distill.distillation_loss(student, examples, tokenizer.pad_token_id, 0.3, loss="kl")


def test_a_perfect_draft_has_alpha_one(teacher, tokenizer, one_thread):
    quality = distill.evaluate(teacher, copy.deepcopy(teacher), tokenizer, word_prompts(3), max_new_tokens=6, gamma=2,
                               timing_repeats=2, progress=False)
    assert quality.alpha == pytest.approx(1.0) and quality.agreement == 1.0
    assert quality.positions > 0 and quality.c > 0


def test_pipeline_end_to_end_writes_a_loadable_draft_and_its_card(teacher, tokenizer, tmp_path, one_thread):
    prompt_file, eval_file = tmp_path / "train.txt", tmp_path / "eval.txt"
    prompt_file.write_text("\n".join(word_prompts(12, seed=1)) + "\n")
    eval_file.write_text("\n".join(word_prompts(3, seed=2)) + "\n")
    out = tmp_path / "draft"
    card = distill.run(teacher, tokenizer, toy_settings(), work=tmp_path / "work", out=out, prompts_file=prompt_file,
                       eval_file=eval_file, command="python -m helpers.distill --toy", progress=False)
    assert 0 <= card["quality"]["alpha"] <= 1 and 0 <= card["quality_before"]["agreement"] <= 1
    assert {"model.safetensors", "config.json", "card.json", "README.md"} <= {p.name for p in out.iterdir()}
    readme = (out / "README.md").read_text()
    assert "python -m helpers.distill --toy" in readme and "α (temperature 1)" in readme
    assert json.loads((out / "card.json").read_text())["train_tokens"] == card["train_tokens"]
    draft = distilled_draft(teacher, out)
    assert draft.dtype == teacher.dtype
    ids = tokenizer("w1 w2", return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.allclose(draft(ids).logits, card["student"](ids).logits, atol=5e-2)


@pytest.mark.parametrize("fast", [True, False])
def test_the_training_precision_follows_the_machine_and_is_recorded(teacher, tokenizer, tmp_path, one_thread,
                                                                     monkeypatch, fast):
    """autocast=None: bf16 where bf16 is fast (helpers.machine.fast_bf16), fp32 elsewhere; the card says which."""
    monkeypatch.setattr(distill, "fast_bf16", lambda device: fast)
    prompt_file = tmp_path / "train.txt"
    prompt_file.write_text("\n".join(word_prompts(12, seed=1)) + "\n")
    card = distill.run(teacher, tokenizer, toy_settings(autocast=None, epochs=0.5), work=tmp_path / "work",
                       out=tmp_path / "draft", prompts_file=prompt_file, eval_file=prompt_file, progress=False)
    assert card["settings"]["autocast"] is fast
    assert ("in bf16 autocast" if fast else "in fp32") in (tmp_path / "draft" / "README.md").read_text()


def test_both_training_precisions_are_timed_and_recorded(teacher, one_thread, monkeypatch):
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    result = distill.time_precisions(teacher, toy_settings(), repeats=2)
    assert set(result["median_s"]) == {"bf16 autocast", "fp32"} and all(v > 0 for v in result["median_s"].values())
    assert all(len(t) == 2 for t in result["raw_s"].values()) and result["onednn_max_cpu_isa"] == "AVX2"


def test_the_precision_flags_override_the_rule():
    parse = distill.parse_args
    assert parse([]).autocast is None
    assert parse(["--fp32-training"]).autocast is False and parse(["--bf16-training"]).autocast is True
    with pytest.raises(SystemExit):
        parse(["--fp32-training", "--bf16-training"])


def test_a_missing_draft_says_how_to_make_one(teacher, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"python -m helpers\.distill"):
        distilled_draft(teacher, tmp_path)


def test_a_work_folder_refuses_to_resume_with_other_settings(tmp_path):
    distill.check_work_folder(tmp_path, toy_settings())
    distill.check_work_folder(tmp_path, toy_settings(eval_prompts=2))  # evaluation settings may change
    with pytest.raises(ValueError, match="other settings \\(batch_size, lr\\)"):
        distill.check_work_folder(tmp_path, toy_settings(batch_size=8, lr=1e-3))
    with pytest.raises(ValueError, match="other settings \\(loss\\)"):
        distill.check_work_folder(tmp_path, toy_settings(loss="rest"))


def test_the_committed_model_card_is_rendered_from_its_card():
    assert (DRAFT_FOLDER / "README.md").read_text() == distill.model_card(json.loads(DRAFT_CARD.read_text()))
