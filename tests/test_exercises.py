"""helpers.exercises: wrong answers get the hint that fixes them. (Right answers: the reference solutions in the
notebooks are run against these checks in tests/test_notebooks.py.)"""

from __future__ import annotations

import pytest
import torch

from helpers import exercises


def test_placeholders_only_remind(capsys):
    exercises.check_top_k(lambda logits, k: None)
    exercises.check_best_gamma(None)
    assert capsys.readouterr().out.count("not attempted yet") == 2


def test_top_k_without_renormalising():
    def no_renorm(logits, k):
        p = torch.softmax(logits, -1)
        return p.masked_fill(logits < torch.topk(logits, k).values[-1], 0)

    with pytest.raises(AssertionError, match="sum to 1"):
        exercises.check_top_k(no_renorm)


def test_positions_off_by_one():
    with pytest.raises(AssertionError, match="never fed back"):
        exercises.check_positions_processed(lambda t, n: (n * t + n * (n - 1) // 2, t + n))


def test_contrastive_without_the_mask():
    def unmasked(e, a, alpha):
        return int((torch.log_softmax(e, -1) - torch.log_softmax(a, -1)).argmax())

    with pytest.raises(AssertionError, match="plausibility mask"):
        exercises.check_cd_choice(unmasked)


def test_residual_without_clipping():
    with pytest.raises(AssertionError):
        exercises.check_residual(lambda p, q: (p - q) / (p - q).sum())


def test_expected_tokens_without_the_bonus_token():
    with pytest.raises(AssertionError, match="1 token"):
        exercises.check_expected_tokens(lambda a, g: (a - a ** (g + 1)) / (1 - a))


def test_distinct_n_and_break_even(capsys):
    with pytest.raises(AssertionError, match="different n-grams"):
        exercises.check_distinct_n(lambda text, n: len(set(text.split())) / len(text.split()))
    with pytest.raises(AssertionError, match="bisection"):
        exercises.check_break_even_alpha(0.3, gamma=4, c=0.16, r=1.7)
    exercises.check_break_even_alpha(1.0, gamma=1, c=0.9, r=1.7)  # no α pays off: "none" is right
    assert "✅" in capsys.readouterr().out


def test_tree_mask_that_forgets_the_grandparents():
    def parents_only(parents):
        mask = torch.eye(len(parents), dtype=torch.bool)
        for i, parent in enumerate(parents):
            if parent >= 0:
                mask[i, parent] = True
        return mask

    with pytest.raises(AssertionError, match="every ancestor"):
        exercises.check_tree_mask(parents_only)


def test_accepted_depth_that_follows_the_first_child_only(capsys):
    def first_child(tokens, parents, continuation):
        depth, node = 0, -1
        while depth < len(continuation):
            children = [i for i, p in enumerate(parents) if p == node]
            if not children or tokens[children[0]] != continuation[depth]:
                return depth
            node, depth = children[0], depth + 1
        return depth

    with pytest.raises(AssertionError, match="the child whose token"):
        exercises.check_accepted_depth(first_child)
    exercises.check_tree_mask(lambda parents: None)
    assert "not attempted yet" in capsys.readouterr().out


def test_p_cd_without_the_mask_or_from_raw_logits():
    def unmasked(e, a, beta_cd, alpha_cd):
        return torch.softmax((1 + beta_cd) * torch.log_softmax(e, -1) - beta_cd * torch.log_softmax(a, -1), -1)

    with pytest.raises(AssertionError, match="V_head"):
        exercises.check_p_cd(unmasked)

    def logits_first(e, a, beta_cd, alpha_cd):
        score = (1 + beta_cd) * e - beta_cd * a * 1.5  # not the log-softmax of the amateur
        score[torch.softmax(e, -1) < alpha_cd * torch.softmax(e, -1).max()] = -torch.inf
        return torch.softmax(score, -1)

    with pytest.raises(AssertionError, match="two softmaxes"):
        exercises.check_p_cd(logits_first)


def test_contrast_overlap_with_p_instead_of_p_cd(capsys):
    exercises.check_contrast_overlap(None)
    assert "not attempted" in capsys.readouterr().out
    with pytest.raises(AssertionError, match="p² / q"):
        exercises.check_contrast_overlap(0.9)
