"""Self-checks for the notebooks' exercises.

Each ``check_*`` takes the learner's answer (a function or a number). It prints ✅ when the answer is right,
raises an ``AssertionError`` with a hint when it is wrong, and prints a reminder while the answer is still the
notebook's placeholder (``None``), so that the notebooks run top to bottom before anyone has solved anything.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from helpers.decoding import contrastive_logits, contrastive_scores, lookup_draft, probabilities
from helpers.metrics import distinct_n
from helpers.timing import expected_tokens, predicted_speedup
from helpers.trees import DraftTree, accepted_depth, tree_attention


def _pending(answer: object, what: str) -> bool:
    if answer is None:
        print(f"⏳ {what}: not attempted yet (replace the placeholder, then run this cell again)")
        return True
    return False


def _ok(what: str) -> None:
    print(f"✅ {what}: correct")


def _random_logits(seed: int, n: int = 50) -> torch.Tensor:
    return torch.randn(n, generator=torch.Generator().manual_seed(seed)) * 3


# --------------------------------------------------------------------------------------- notebook 01
def check_top_k(fn: Callable[[torch.Tensor, int], torch.Tensor]) -> None:
    """01, exercise 1: ``fn(logits, k)`` returns the top-k sampling distribution (probabilities)."""
    what = "top-k filter"
    if _pending(fn(_random_logits(0), 3), what):
        return
    for seed, k in ((0, 1), (1, 3), (2, 10), (3, 50)):
        logits = _random_logits(seed)
        got = torch.as_tensor(fn(logits, k), dtype=torch.float32)
        assert got.shape == logits.shape, f"return one probability per token: shape {tuple(logits.shape)}"
        assert abs(float(got.sum()) - 1) < 1e-4, "the probabilities must sum to 1: renormalise after filtering"
        assert int((got > 0).sum()) == k, (f"with k={k} exactly {k} tokens must keep a probability > 0: "
                                           "keep the k largest logits, set the others to -inf before softmax")
        assert torch.allclose(got, probabilities(logits, 1.0, top_k=k), atol=1e-5), \
            "the kept tokens should keep their relative probabilities: softmax over the k largest logits"
    _ok(what)


def check_positions_processed(fn: Callable[[int, int], tuple[int, int]]) -> None:
    """01, exercise 2: ``fn(L, N)`` -> token positions the model processes to write N tokens after an L-token
    prompt, (without cache, with cache)."""
    what = "positions processed"
    if _pending(fn(5, 3), what):
        return
    for t, n in ((5, 3), (1, 1), (10, 40), (100, 1)):
        no_cache, cache = fn(t, n)
        assert cache == t + n - 1, ("with a cache the prompt is read once and every new token once, except the "
                                    "last one, which is never fed back")
        assert no_cache == n * t + n * (n - 1) // 2, ("without a cache step i re-reads the whole prefix of "
                                                       "L + i tokens, for i = 0 .. N-1")
    _ok(what)


# --------------------------------------------------------------------------------------- notebook 02
def check_cd_choice(fn: Callable[[torch.Tensor, torch.Tensor, float], int]) -> None:
    """02, exercise 1: ``fn(expert_logits, amateur_logits, alpha)`` -> the contrastive decoding token (τ = 1)."""
    what = "contrastive decoding choice"
    if _pending(fn(_random_logits(0), _random_logits(1), 0.1), what):
        return
    for seed, alpha in ((0, 0.1), (2, 0.5), (4, 1e-3), (6, 1.0)):
        e, a = _random_logits(seed), _random_logits(seed + 1)
        expected = int(contrastive_scores(e, a, alpha).scores.argmax())
        got = int(fn(e, a, alpha))
        if got == int((torch.log_softmax(e, -1) - torch.log_softmax(a, -1)).argmax()) and got != expected:
            raise AssertionError("you maximised the score over *all* tokens: first drop the tokens with "
                                 "p_exp < α_CD · max p_exp (the plausibility mask)")
        assert got == expected, ("score = log p_exp − log p_ama (log-softmax of each model's logits), "
                                 "argmax over the tokens with p_exp ≥ α_CD · max p_exp")
    _ok(what)


def check_alpha_for_greedy(alpha: float | None) -> None:
    """02, exercise 2: the α_CD for which contrastive decoding always equals greedy decoding of the expert."""
    what = "α_CD that makes CD greedy"
    if _pending(alpha, what):
        return
    assert math.isclose(alpha, 1.0), ("look at V_head = {x : p_exp(x) ≥ α_CD · max p_exp}: for which α_CD does it "
                                      "contain only the expert's favourite token?")
    _ok(what)


# --------------------------------------------------------------------------------------- notebook 03
def check_residual(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
    """03, exercise 1: ``fn(p, q)`` -> the distribution a rejected draft is replaced from, norm(max(0, p − q))."""
    what = "residual distribution"
    p0, q0 = torch.softmax(_random_logits(0, 8), -1), torch.softmax(_random_logits(1, 8), -1)
    if _pending(fn(p0, q0), what):
        return
    for seed in range(4):
        p, q = torch.softmax(_random_logits(seed, 8), -1), torch.softmax(_random_logits(seed + 10, 8), -1)
        got = torch.as_tensor(fn(p, q), dtype=torch.float32)
        assert abs(float(got.sum()) - 1) < 1e-5, "normalise: divide max(0, p − q) by its sum"
        assert bool((got >= 0).all()), "clip negative differences to 0 before normalising"
        want = torch.clamp(p - q, min=0) / torch.clamp(p - q, min=0).sum()
        assert torch.allclose(got, want, atol=1e-6), "the residual is max(0, p − q) / Σ max(0, p − q)"
    _ok(what)


def check_expected_tokens(fn: Callable[[float, int], float]) -> None:
    """03, exercise 2: ``fn(alpha, gamma)`` -> expected tokens per iteration (Leviathan et al. Eq. 1)."""
    what = "expected tokens per iteration"
    if _pending(fn(0.5, 3), what):
        return
    for alpha, gamma in ((0.5, 3), (0.0, 4), (0.9, 1), (0.75, 7)):
        got = float(fn(alpha, gamma))
        assert math.isclose(got, expected_tokens(alpha, gamma), rel_tol=1e-6), (
            "each iteration emits the accepted drafts + 1 token; draft i survives with probability α^i, "
            "so E = 1 + α + α² + … + α^γ = (1 − α^(γ+1)) / (1 − α)")
    _ok(what)


def check_best_gamma(gamma: int | None, *, alpha: float = 0.8, c: float = 0.1, r: float = 1.0) -> None:
    """03, exercise 3: the γ in 1..20 with the largest predicted speedup for the given α, c and r."""
    what = f"best γ for α={alpha}, c={c}"
    if _pending(gamma, what):
        return
    best = max(range(1, 21), key=lambda g: predicted_speedup(alpha, g, c, r))
    assert gamma == best, (f"predicted speedup = E[tokens] / (γ·c + r); evaluate it for γ = 1..20 "
                           f"(γ={gamma} gives {predicted_speedup(alpha, gamma, c, r):.2f}×)")
    _ok(what)


# --------------------------------------------------------------------------------------- notebook 04
def check_distinct_n(fn: Callable[[str, int], float]) -> None:
    """04, exercise 1: ``fn(text, n)`` -> distinct-n, the share of unique word n-grams."""
    what = "distinct-n"
    if _pending(fn("a b a b", 1), what):
        return
    for text, n in (("a b a b", 1), ("a b a b", 2), ("the cat sat on the mat", 1), ("x x x x", 3),
                    ("one two three", 2)):
        got = float(fn(text, n))
        assert math.isclose(got, distinct_n(text, n)), (
            "split on whitespace, form the n-grams as tuples of n consecutive words, and divide the number of "
            f"different n-grams by the number of n-grams (for {text!r}, n={n}: expected {distinct_n(text, n):.3f})")
    _ok(what)


def check_break_even_alpha(alpha: float | None, *, gamma: int, c: float, r: float) -> None:
    """04, exercise 2: the acceptance rate α at which speculative decoding with (γ, c, r) is exactly as fast as
    naive decoding (predicted speedup = 1), to two decimals."""
    what = f"break-even α for γ={gamma}, c={c:.2f}, r={r:.2f}"
    if _pending(alpha, what):
        return
    if predicted_speedup(0.999, gamma, c, r) < 1:
        assert alpha >= 1, "even α → 1 gives no speedup with these costs: the answer is 'none' (any value ≥ 1)"
    else:
        low, high = 0.0, 0.999
        for _ in range(60):
            mid = (low + high) / 2
            low, high = (mid, high) if predicted_speedup(mid, gamma, c, r) < 1 else (low, mid)
        assert abs(alpha - low) < 0.01, ("solve E[tokens](α, γ) / (γc + r) = 1 for α: bisection on "
                                         f"helpers.timing.predicted_speedup works (your α gives "
                                         f"{predicted_speedup(min(alpha, 0.999), gamma, c, r):.2f}×)")
    _ok(what)


# --------------------------------------------------------------------------------------- notebook 05
def check_beta(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor | float]) -> None:
    """05, exercise 1: ``fn(p, q)`` -> β, the probability that speculative sampling accepts the draft at one
    position when the expert's distribution is p and the draft's is q."""
    what = "β = Σ min(p, q)"
    p, q = torch.softmax(_random_logits(20), -1), torch.softmax(_random_logits(21), -1)
    if _pending(fn(p, q), what):
        return
    for seed in range(5):
        p, q = torch.softmax(_random_logits(30 + seed), -1), torch.softmax(_random_logits(40 + seed), -1)
        expected = float(torch.minimum(p, q).sum())
        got = float(fn(p, q))
        assert math.isclose(got, expected, rel_tol=1e-5), (
            "a draft token x ~ q is accepted with probability min(1, p(x)/q(x)); average that over x ~ q: "
            f"Σ_x q(x)·min(1, p(x)/q(x)) = Σ_x min(q(x), p(x)) (expected {expected:.4f}, got {got:.4f})")
    assert math.isclose(float(fn(p, p)), 1.0, rel_tol=1e-5), "a draft equal to the expert is always accepted"
    _ok(what)


# --------------------------------------------------------------------------------------- notebook 06
def check_lookup(fn: Callable[[list[int], int, int], list[int]]) -> None:
    """06, exercise 1: ``fn(context, n_tokens, max_ngram)`` -> the prompt-lookup draft (a list of token ids)."""
    what = "prompt-lookup draft"
    if _pending(fn([1, 2, 3, 1, 2], 3, 2), what):
        return
    cases = [([1, 2, 3, 1, 2], 3, 2), ([1, 2, 3, 4, 9, 2, 3, 5, 6, 2, 3], 2, 2), ([5, 6, 7], 2, 3),
             ([4, 4, 4, 4], 5, 1), ([1, 2, 9, 8, 1, 3, 2], 4, 3), ([7], 3, 2), ([1, 2, 3, 4, 2, 3, 4], 10, 3)]
    for context, n_tokens, max_ngram in cases:
        expected = lookup_draft(context, n_tokens, max_ngram)
        got = list(fn(list(context), n_tokens, max_ngram))
        assert got == expected, (
            f"for context={context}, n_tokens={n_tokens}, max_ngram={max_ngram} expected {expected}, got {got}: "
            "try the longest n-gram first, take its most recent earlier occurrence, copy at most n_tokens "
            "tokens after it; [] when nothing matches")
    _ok(what)


# --------------------------------------------------------------------------------------- notebook 07
_TREES = ([-1, -1, 0, 0, 2], [-1, 0, 1, 2], [-1, -1, -1], [-1, 0, 0, 1, 1, 3, -1])


def check_tree_mask(fn: Callable[[list[int]], torch.Tensor]) -> None:
    """07, exercise 1: ``fn(parents)`` -> the (n, n) bool tree attention mask (node i sees j iff j is i or one of
    its ancestors; ``parents[i]`` = -1 for a child of the root)."""
    what = "tree attention mask"
    if _pending(fn([-1, 0]), what):
        return
    for parents in _TREES:
        expected = tree_attention(parents)
        got = torch.as_tensor(fn(list(parents))).bool()
        assert got.shape == expected.shape, f"for parents={parents} expected shape {tuple(expected.shape)}, got " \
                                            f"{tuple(got.shape)}: one row and one column per node"
        assert torch.equal(got, expected), (
            f"for parents={parents} expected\n{expected.int()}\ngot\n{got.int()}\nrow i: True at i and at every "
            "ancestor of i (follow parents until -1); siblings and cousins stay False")
    _ok(what)


def check_accepted_depth(fn: Callable[[list[int], list[int], list[int]], int]) -> None:
    """07, exercise 2: ``fn(tokens, parents, continuation)`` -> how many drafted tokens greedy tree verification
    keeps: the depth of the longest root path whose tokens equal the start of ``continuation``."""
    what = "accepted depth of a draft tree"
    if _pending(fn([3], [-1], [3]), what):
        return
    tokens = [3, 5, 7, 2, 9, 7, 4]
    parents = [-1, -1, 0, 0, 2, 1, 5]
    depths = [1, 1, 2, 2, 3, 2, 3]
    tree = DraftTree(tokens=tokens, parents=parents, depths=depths, scores=[0.0] * len(tokens))
    for continuation in ([3, 7, 9, 1], [3, 2, 9], [5, 7, 4, 4], [5, 2], [4], [3, 7], [9, 9]):
        expected = accepted_depth(tree, continuation)
        got = fn(list(tokens), list(parents), list(continuation))
        assert got == expected, (
            f"tree tokens={tokens}, parents={parents}, continuation={continuation}: expected {expected}, got {got}. "
            "Walk down from the root: at each depth move to the child whose token is the expert's next token; stop "
            "when no child matches")
    _ok(what)


# --------------------------------------------------------------------------------------- notebook 08
def check_p_cd(fn: Callable[[torch.Tensor, torch.Tensor, float, float], torch.Tensor]) -> None:
    """08, exercise 1: ``fn(expert_logits, amateur_logits, beta_cd, alpha_cd)`` -> p_cd at temperature 1."""
    what = "the contrastive target p_cd"
    if _pending(fn(_random_logits(50), _random_logits(51), 0.5, 0.1), what):
        return
    for seed, beta_cd, alpha_cd in ((0, 0.5, 0.1), (1, 1.0, 0.1), (2, 0.0, 0.3), (3, 2.0, 0.01)):
        expert_logits, amateur_logits = _random_logits(60 + seed), _random_logits(70 + seed)
        expected = probabilities(contrastive_logits(expert_logits, amateur_logits, beta=beta_cd, alpha=alpha_cd))
        got = torch.as_tensor(fn(expert_logits, amateur_logits, beta_cd, alpha_cd), dtype=torch.float32)
        assert got.shape == expected.shape, f"return one probability per token: shape {tuple(expected.shape)}"
        assert abs(float(got.sum()) - 1) < 1e-4, "p_cd must sum to 1: a softmax over the scores, -inf outside V_head"
        assert torch.equal(got > 0, expected > 0), (
            "p_cd is positive exactly on V_head = {x : p(x) >= α_CD · max p}: compare the expert's probabilities "
            "(after a softmax) with α_CD times their maximum, and give every other token the score -inf")
        assert torch.allclose(got, expected, atol=1e-5), (
            "inside V_head the score is (1 + β_CD)·log p(x) − β_CD·log q(x), with p and q the two softmaxes (not "
            "the raw logits minus each other before the softmax)")
    _ok(what)


CONTRAST_EXAMPLE = {"p": (0.5, 0.3, 0.2), "q": (0.6, 0.3, 0.1), "beta_cd": 1.0, "alpha_cd": 0.1}
"""08, exercise 2: one position over three tokens, all inside V_head."""


def check_contrast_overlap(answer: float | None) -> None:
    """08, exercise 2: Σ_x min(p_cd(x), q(x)) for :data:`CONTRAST_EXAMPLE`."""
    what = "acceptance under the contrast"
    if _pending(answer, what):
        return
    p, q = (torch.tensor(CONTRAST_EXAMPLE[k]) for k in ("p", "q"))
    p_cd = probabilities(contrastive_logits(p.log(), q.log(), beta=CONTRAST_EXAMPLE["beta_cd"],
                                            alpha=CONTRAST_EXAMPLE["alpha_cd"]))
    expected = float(torch.minimum(p_cd, q).sum())
    assert math.isclose(float(answer), expected, abs_tol=1e-3), (
        "p_cd ∝ p^(1+β_CD) / q^β_CD = p² / q here; normalise it, then add up min(p_cd(x), q(x)) over the three "
        f"tokens (got {float(answer):.4f})")
    _ok(what)
