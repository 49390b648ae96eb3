"""helpers.trees: the tree mask, tree drafting with a head, greedy tree verification and the measurement, on tiny
random models. The tree passes are checked against plain sequential passes along every path."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import random_head, tiny_llama
from transformers import DynamicCache

from helpers import speed
from helpers.decoding import naive
from helpers.heads import head_speculative
from helpers.trees import (
    DraftTree,
    TreeShape,
    TreeVerifyStep,
    accepted_depth,
    accepted_path,
    draft_tree,
    explained_by_prompt,
    main,
    markdown_table,
    measure,
    tree_attention,
    tree_inputs,
    tree_rounds,
)


@pytest.fixture(scope="module")
def expert():
    return tiny_llama(0, layers=2)


@pytest.fixture(scope="module")
def head(expert):
    return random_head(expert, seed=2, scale=2.0)


def features_of(expert, ids):
    with torch.no_grad():
        return expert(ids, output_hidden_states=True).hidden_states[-1][0]


def test_tree_attention_is_ancestors_and_self():
    #        root
    #       /    \
    #      0      1
    #     / \
    #    2   3
    allowed = tree_attention([-1, -1, 0, 0])
    expected = torch.tensor([[1, 0, 0, 0], [0, 1, 0, 0], [1, 0, 1, 0], [1, 0, 0, 1]], dtype=torch.bool)
    assert torch.equal(allowed, expected)
    with pytest.raises(ValueError, match="parents must come before their children"):
        tree_attention([-1, 2, 0])


def test_one_tree_pass_gives_the_expert_logits_of_every_path(expert, prompt):
    tree = DraftTree(tokens=[3, 5, 7, 2, 9], parents=[-1, -1, 0, 0, 2], depths=[1, 1, 2, 2, 3], scores=[0.0] * 5)
    logits = TreeVerifyStep(expert, prompt, tree.parents, tree.tokens)()[0]
    with torch.no_grad():
        root = expert(prompt).logits[0, -1]
        torch.testing.assert_close(logits[0], root, rtol=1e-4, atol=1e-5)
        for node in range(len(tree)):
            path = torch.tensor([[tree.tokens[i] for i in tree.path(node)]])
            sequential = expert(torch.cat([prompt, path], dim=1)).logits[0, -1]
            torch.testing.assert_close(logits[node + 1], sequential, rtol=1e-4, atol=1e-5)


def test_the_verify_step_can_be_repeated(expert, prompt):
    step = TreeVerifyStep(expert, prompt, [-1, 0, 0])
    torch.testing.assert_close(step(), step())
    assert step.cache.get_seq_length() == prompt.shape[1] - 1


def head_path_probability(head, features, tokens, path_tokens):
    """The head's probability of a path, drafted step by step without a cache or a tree (the chain of
    helpers.heads.HeadDrafter, recomputed from scratch)."""
    with torch.no_grad():
        predicted = head(features[None], tokens[None, 1:])[0]
        feats, toks, probability = features, tokens, 1.0
        for token in path_tokens:
            q = torch.softmax(head.logits(predicted[-1]), dim=-1)
            probability *= float(q[int((head.vocab == token).nonzero())])
            feats = torch.cat([feats, predicted[-1:]])
            toks = torch.cat([toks, torch.tensor([token])])
            predicted = head(feats[None], toks[None, 1:])[0]
    return probability


@pytest.mark.parametrize("shape", [TreeShape(6, 2, 3), TreeShape(9, 3, 4), TreeShape(3, 1, 3)])
def test_a_tree_holds_the_most_probable_paths_under_the_head(expert, head, prompt, shape):
    tokens = torch.cat([prompt[0], torch.tensor([4])])
    features = features_of(expert, prompt)
    cache = DynamicCache(config=head.config)
    tree = draft_tree(head, features, tokens, cache, n_nodes=shape.n_nodes, top_k=shape.top_k, depth=shape.depth)
    assert len(tree) == shape.n_nodes and cache.get_seq_length() == prompt.shape[1]
    for i, (parent, depth) in enumerate(zip(tree.parents, tree.depths, strict=True)):
        assert parent < i and depth == (1 if parent < 0 else tree.depths[parent] + 1) <= shape.depth
        path = [tree.tokens[j] for j in tree.path(i)]
        # the score is the path's probability under the head drafting it as a chain: the tree mask is right
        assert tree.scores[i] == pytest.approx(head_path_probability(head, features, tokens, path), rel=1e-4)
    siblings = [tree.tokens[i] for i in range(len(tree)) if tree.parents[i] == -1]
    assert len(set(siblings)) == len(siblings) <= shape.top_k
    if shape.top_k == 1:
        assert tree.parents == [-1, 0, 1]


def test_drafting_again_from_the_cache_gives_the_same_tree(expert, head, prompt):
    tokens = torch.cat([prompt[0], torch.tensor([4])])
    features = features_of(expert, prompt)
    cache = DynamicCache(config=head.config)
    first = draft_tree(head, features[:-1], tokens[:-1], cache, n_nodes=4, top_k=2, depth=3)
    again = draft_tree(head, features, tokens, cache, n_nodes=5, top_k=2, depth=3)  # reads one more position
    fresh = draft_tree(head, features, tokens, DynamicCache(config=head.config), n_nodes=5, top_k=2, depth=3)
    assert first.tokens != [] and again.tokens == fresh.tokens and again.parents == fresh.parents
    assert again.scores == pytest.approx(fresh.scores, rel=1e-5)


def test_accepted_depth_is_the_longest_matching_path():
    tree = DraftTree(tokens=[3, 5, 7, 2, 9], parents=[-1, -1, 0, 0, 2], depths=[1, 1, 2, 2, 3], scores=[0.0] * 5)
    assert accepted_depth(tree, [3, 7, 9, 1]) == 3
    assert accepted_depth(tree, [3, 2, 9]) == 2
    assert accepted_depth(tree, [5, 7]) == 1
    assert accepted_depth(tree, [4, 3]) == 0
    assert accepted_depth(tree, [3]) == 1  # the continuation ends
    assert accepted_path(tree, [3, 7, 9, 1]) == [0, 2, 4] and accepted_path(tree, [4]) == []


def test_a_simulated_chain_keeps_what_head_speculative_keeps(expert, head, prompt):
    gamma, n = 3, 14
    run = head_speculative(expert, head, prompt, max_new_tokens=n, gamma=gamma, temperature=0.0)
    kept = [len(it.emitted) for it in run.trace]
    assert tree_rounds(expert, head, prompt, run.new_token_ids, TreeShape(gamma, 1, gamma)) == kept


def test_a_tree_keeps_at_least_what_its_chain_keeps(expert, head, prompt):
    continuation = naive(expert, prompt, max_new_tokens=16, temperature=0.0).new_token_ids
    chain = tree_rounds(expert, head, prompt, continuation, TreeShape(3, 1, 3))
    tree = tree_rounds(expert, head, prompt, continuation, TreeShape(9, 3, 3))
    assert sum(chain) == sum(tree) == 16 and len(tree) <= len(chain)


def test_bad_shapes_are_refused(expert, head, prompt):
    tokens = torch.cat([prompt[0], torch.tensor([4])])
    features = features_of(expert, prompt)
    with pytest.raises(ValueError, match="fewer than 20 nodes"):
        draft_tree(head, features, tokens, DynamicCache(config=head.config), n_nodes=20, top_k=2, depth=3)
    with pytest.raises(ValueError, match="top_k must be an int >= 1"):
        draft_tree(head, features, tokens, DynamicCache(config=head.config), n_nodes=2, top_k=0, depth=3)
    with pytest.raises(ValueError, match="T \\+ 1"):
        draft_tree(head, features, tokens[:-1], DynamicCache(config=head.config), n_nodes=2, top_k=2, depth=3)


def test_measure_reports_every_shape(expert, head, one_thread):
    prompts = [torch.tensor([[1, 2, 3]]), torch.tensor([[4, 5, 6, 7, 8]])]
    shapes = [TreeShape(2, 1, 2), TreeShape(4, 2, 3)]
    result = measure(expert, head, prompts, max_new_tokens=8, shapes=shapes, repeats=2, progress=False)
    assert [row["name"] for row in result["rows"]] == ["chain γ=2", "tree 4 nodes (top-2, depth 3)"]
    for row in result["rows"]:
        assert 1 <= row["tokens_per_call"] <= row["shape"]["depth"] + 1
        assert len(row["tokens_per_call_by_prompt"]) == 2
        assert all(0 < row[key] < math.inf for key in ("draft_cost", "r_tree", "explained_speedup"))
    assert "| chain γ=2 | 2 |" in markdown_table(result)
    for row in result["rows"]:
        by_prompt = explained_by_prompt(result, row)
        assert len(by_prompt) == 2 and 2 / sum(1 / e for e in by_prompt) == pytest.approx(row["explained_speedup"])


def test_the_mask_follows_the_experts_dtype():
    mask, positions = tree_inputs([-1, 0, -1], prefix=2, dtype=torch.bfloat16)
    assert mask.dtype == torch.bfloat16 and mask.shape == (1, 1, 4, 6)
    assert mask.min() == torch.finfo(torch.bfloat16).min and positions.tolist() == [[2, 3, 4, 3]]


def test_main_refuses_bf16_where_the_cpu_would_emulate_it(monkeypatch, capsys):
    monkeypatch.setattr(speed, "fast_bf16", lambda device: False)
    with pytest.raises(SystemExit):
        main(["--dtype", "bf16", "--out", "unused.json"])
    assert "no bf16 instructions" in capsys.readouterr().err
