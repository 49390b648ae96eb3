"""Training a draft head (helpers.train_head) end to end on toy sizes: a tiny random teacher, a word tokenizer."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import tiny_llama, word_prompts
from transformers import DynamicCache

from helpers import distill, train_head
from helpers.data import HEAD_FOLDER
from helpers.heads import DraftHead, load_head


def toy_settings(**overrides) -> train_head.HeadSettings:
    settings = train_head.HeadSettings(n_prompts=16, batch_size=4, max_new_tokens=6, top_k=3, greedy_every=2,
                                       draft_vocab=6, epochs=3.0, train_batch=4, lr=1e-2, warmup=2, eval_prompts=2,
                                       eval_tokens=5, eval_gamma=2, timing_repeats=2)
    for name, value in overrides.items():
        setattr(settings, name, value)
    return settings


@pytest.fixture(scope="module")
def data(teacher, tokenizer, tmp_path_factory):
    folder = tmp_path_factory.mktemp("head")
    settings = toy_settings()
    shards = distill.generate(teacher, tokenizer, word_prompts(16), folder / "teacher", settings.teacher(),
                              progress=False)
    files = train_head.features(teacher, shards, folder / "work", progress=False)
    return train_head.load_sequences(shards, files)


def test_features_are_the_experts_last_hidden_states(teacher, data):
    s = max(data, key=lambda s: len(s.tokens))
    with torch.no_grad():
        direct = teacher(s.tokens[None], output_hidden_states=True).hidden_states[-1][0]
    torch.testing.assert_close(s.features.float(), direct, atol=2e-2, rtol=1e-2)  # stored in fp16


def test_a_fused_heads_features_hold_its_layers_f_last_and_it_learns_over_two_steps(teacher, tokenizer, tmp_path):
    """The fused features' stage stores the listed layers side by side (f the last block, what the loss targets);
    the fused head trains with the training-time test and its loss falls."""
    shards = distill.generate(teacher, tokenizer, word_prompts(16), tmp_path / "teacher", toy_settings().teacher(),
                              progress=False)
    layers = (0, 1, -1)
    fused = train_head.load_sequences(shards, train_head.features(teacher, shards, tmp_path / "fused", layers=layers,
                                                                  progress=False))
    d = teacher.config.hidden_size
    s = max(fused, key=lambda s: len(s.tokens))
    with torch.no_grad():
        hidden = teacher(s.tokens[None], output_hidden_states=True).hidden_states
    assert s.features.shape == (len(s.tokens), 3 * d)
    for block, layer in enumerate(layers):
        torch.testing.assert_close(s.features[:, block * d:(block + 1) * d].float(), hidden[layer][0], atol=2e-2,
                                   rtol=1e-2)
    settings = toy_settings(steps=2)
    head = DraftHead.for_expert(teacher, train_head.draft_vocabulary(fused, 8), seed=0, feature_layers=layers)
    before, _ = train_head.head_loss(head, fused, settings.cls_weight, 0.0, steps=2)
    train_head.train(head, fused[2:], fused[:2], tmp_path / "train", settings, progress=False)
    after, parts = train_head.head_loss(head, fused, settings.cls_weight, 0.0, steps=2)
    assert after < before and 0 <= parts["top1_last"] <= 1


def test_the_draft_vocabulary_holds_the_most_written_tokens_and_eos(data):
    vocab = train_head.draft_vocabulary(data, 3, eos_token_id=1)
    assert len(vocab) == 3 and 1 in vocab.tolist() and vocab.tolist() == sorted(vocab.tolist())
    everything = train_head.draft_vocabulary(data, 100)
    assert train_head.coverage(data, everything) == 1.0 > train_head.coverage(data, vocab)


def test_the_unrolled_training_pass_is_what_drafting_computes(teacher):
    """Training-time test: the second pass of head_loss at position t must equal the head's second draft step in
    real drafting: the cache holds true-feature inputs up to t - 1, the input at t is the head's own f̂_t."""
    torch.manual_seed(0)
    head = DraftHead.for_expert(teacher, torch.arange(teacher.config.vocab_size)).eval()
    length, d = 7, teacher.config.hidden_size
    feats, tokens = torch.randn(1, length, d), torch.randint(0, teacher.config.vocab_size, (1, length + 1))
    with torch.no_grad():
        cache = DynamicCache(config=head.config)
        first = head(feats, tokens[:, 1:], cache)
        shifted = torch.cat([torch.zeros_like(first[:, :1]), first[:, :-1]], dim=1)
        second = head(shifted, tokens[:, 1:], cache, allowed=train_head.unrolled_mask(length, 2))
        for t in range(1, length):
            drafting = DynamicCache(config=head.config)
            step1 = head(feats[:, :t], tokens[:, 1:t + 1], drafting)[:, -1:]  # f̂_t, from the true f_{t-1}
            step2 = head(step1, tokens[:, t + 1:t + 2], drafting, start=t)  # the second draft step, at t
            torch.testing.assert_close(second[:, t], step2[:, 0], atol=1e-5, rtol=1e-4)
    mask = train_head.unrolled_mask(4, 3)
    assert mask.shape == (4, 12) and mask[3].nonzero().flatten().tolist() == [0, 1, 6, 11]


def test_training_lowers_the_loss_and_resumes(teacher, data, tmp_path):
    settings = toy_settings()
    head = DraftHead.for_expert(teacher, train_head.draft_vocabulary(data, 8), seed=0)
    before, _ = train_head.head_loss(head, data, settings.cls_weight, 0.0)
    log = train_head.train(head, data[2:], data[:2], tmp_path, settings, progress=False)
    after, parts = train_head.head_loss(head, data, settings.cls_weight, 0.0)
    assert after < before and 0 <= parts["top1"] <= 1
    assert {"valid_loss", "valid_top1", "valid_top1_last", "regression", "classification", "seconds"} <= log[-1].keys()
    settings.epochs = 4.0  # a rerun with more epochs continues from the checkpoint
    again = DraftHead.for_expert(teacher, train_head.draft_vocabulary(data, 8), seed=0)
    log2 = train_head.train(again, data[2:], data[:2], tmp_path, settings, progress=False)
    assert log2[:len(log)] == log and log2[-1]["step"] > log[-1]["step"]


def test_pipeline_end_to_end_writes_a_loadable_head_and_its_card(teacher, tokenizer, tmp_path, one_thread):
    prompt_file, eval_file = tmp_path / "train.txt", tmp_path / "eval.txt"
    prompt_file.write_text("\n".join(word_prompts(16, seed=1)) + "\n")
    eval_file.write_text("w1 w2 w3\nw4 w5\n")  # the timing step needs a prompt of 2 tokens or more
    out = tmp_path / "head"
    card = train_head.run(teacher, tokenizer, toy_settings(), work=tmp_path / "work", teacher=tmp_path / "teacher",
                          out=out, prompts_file=prompt_file, eval_file=eval_file,
                          command="python -m helpers.train_head --toy", progress=False)
    q = card["quality"]
    assert 0 <= q["alpha"] <= 1 and 0 <= q["agreement"] <= 1 and q["tokens_per_call"] >= 1
    assert q["c"] > 0 and q["c_full_vocab"] > 0 and 0 < card["coverage_valid"] <= 1
    assert json.loads((out / "card.json").read_text())["command"] == "python -m helpers.train_head --toy"
    readme = (out / "README.md").read_text()
    assert f"| α at temperature 1 (mean β) | {q['alpha']:.3f} |" in readme
    assert "python -m helpers.train_head --toy" in readme
    assert f"fc [e(x_{{t+1}}); f_t] (2 x {teacher.config.hidden_size} -> {teacher.config.hidden_size})" in readme
    loaded = load_head(teacher, out)
    assert torch.equal(loaded.vocab, card["head"].vocab)
    with pytest.raises(ValueError, match="other settings"):
        train_head.run(teacher, tokenizer, toy_settings(lr=1e-3), work=tmp_path / "work", teacher=tmp_path / "teacher",
                       out=None, prompts_file=prompt_file, eval_file=eval_file, progress=False)


def test_a_fused_head_from_the_command_line_settings(tokenizer, tmp_path, one_thread):
    """``--fused --steps 2`` end to end on a 4-layer teacher: the saved head reads EAGLE-3's layers, its card says
    so, and it loads and drafts; an expert too shallow for three layers is refused."""
    teacher = tiny_llama(3, layers=4)
    prompt_file, eval_file = tmp_path / "train.txt", tmp_path / "eval.txt"
    prompt_file.write_text("\n".join(word_prompts(16, seed=1)) + "\n")
    eval_file.write_text("w1 w2 w3\nw4 w5\n")
    out = tmp_path / "head"
    card = train_head.run(teacher, tokenizer, toy_settings(fused=True, steps=2), work=tmp_path / "work",
                          teacher=tmp_path / "teacher", out=out, prompts_file=prompt_file, eval_file=eval_file,
                          progress=False)
    loaded = load_head(teacher, out)
    assert loaded.feature_layers == (2, 2, -1) and card["settings"]["fused"]
    assert "EAGLE-3's fused features" in (out / "README.md").read_text()
    assert 0 <= card["quality"]["alpha"] <= 1
    with pytest.raises(ValueError, match="use one of 4 or more"):
        train_head.run(tiny_llama(3, layers=2), tokenizer, toy_settings(fused=True), work=tmp_path / "work2",
                       teacher=tmp_path / "teacher", out=None, prompts_file=prompt_file, eval_file=eval_file,
                       progress=False)


def test_teacher_shards_refuse_other_data_settings(teacher, tokenizer, tmp_path):
    settings = toy_settings()
    distill.generate(teacher, tokenizer, word_prompts(4), tmp_path, settings.teacher(), progress=False)
    with pytest.raises(ValueError, match="teacher data made with other settings"):
        distill.generate(teacher, tokenizer, word_prompts(4), tmp_path, toy_settings(max_new_tokens=5).teacher(),
                         progress=False)


def test_the_committed_model_card_is_rendered_from_its_card():
    card = json.loads((HEAD_FOLDER / "card.json").read_text())
    config = json.loads((HEAD_FOLDER / "head.json").read_text())
    assert (HEAD_FOLDER / "README.md").read_text() == train_head.model_card(card, config)
