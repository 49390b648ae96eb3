"""Draft trees (notebook 07, "Trees instead of chains"): EAGLE-2's dynamic draft tree, measured.

Li et al. 2024, "EAGLE-2: Faster Inference of Language Models with Dynamic Draft Trees". A chain drafts one
guess per position; when its first guess is wrong the rest is wasted. A **tree** keeps several guesses per
position: the head expands the ``top_k`` most likely nodes of each level into their ``top_k`` most likely
children, and the ``n_nodes`` nodes with the highest path probability (the product of the head's probabilities
from the root) are kept (:func:`draft_tree`). The expert checks the whole tree in **one** forward pass in which
each node attends to the prefix and to its own ancestors only (:func:`tree_attention`, :class:`TreeVerifyStep`),
and greedy verification keeps the longest path that agrees with the expert's own choices.

Two ways to ask whether a tree pays. **Simulated** (:func:`measure`): a tree's *gain* is the number of tokens per
expert call, ``1 + accepted depth``; at temperature 0 the accepted depth is the longest root path whose tokens
equal the expert's greedy continuation (:func:`accepted_depth`), known from one greedy run. Its *cost* is the head's
expansion passes plus one expert pass over ``n_nodes + 1`` tokens with a tree mask, timed on their own. That
decides cheaply whether a tree decoder could pay on a CPU. **Decoded** (:func:`tree_speculative`, timed by
:func:`decode_speed` with the speed protocol): the decoder itself, greedy, which after every round compacts the
expert's KV cache to the accepted path (:func:`compact`) and hands the head the expert's features of exactly those
positions (the head's own cache only ever holds true positions: :func:`draft_tree` crops its expansions).
"""

from __future__ import annotations

import argparse
import datetime
import inspect
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import DynamicCache, PreTrainedModel

from helpers.compare import Interval, mean_of
from helpers.data import ARTICLE_PROMPTS, EVAL_PROMPTS, PROMPTS, read_prompts, write_json
from helpers.decoding import EosIds, Generation, Stats, naive
from helpers.decoding.core import _eos_set, check_inputs, expert_features
from helpers.heads import DraftHead, check_attached, head_speculative
from helpers.kernels import KERNELS
from helpers.machine import machine_info
from helpers.models import Pair
from helpers.protocol import MIN_PROMPTS, Decoder, mean_speedup, speedup, timed_runs
from helpers.speed import DTYPES, interval_text, load, notebooks_reading, path_name, same_text, split
from helpers.timing import ForwardStep, interleaved, median


@dataclass
class DraftTree:
    """Nodes in the order they were kept (parents before children). Node i drafts ``tokens[i]`` at depth
    ``depths[i]`` (1 = right after the root, the last verified token) below node ``parents[i]`` (-1: the root)."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    depths: list[int] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    """Path probability under the head: the product of its probabilities from the root to the node."""

    def __len__(self) -> int:
        return len(self.tokens)

    def path(self, node: int) -> list[int]:
        """The node indices from depth 1 down to ``node``."""
        path = []
        while node >= 0:
            path.append(node)
            node = self.parents[node]
        return path[::-1]


def tree_attention(parents: Sequence[int]) -> torch.Tensor:
    """(n, n) bool: node i may attend to node j iff j is i or one of its ancestors (EAGLE-2's tree mask; the
    prefix before the tree is visible to every node)."""
    n = len(parents)
    allowed = torch.eye(n, dtype=torch.bool)
    for i, parent in enumerate(parents):
        if not -1 <= parent < i:
            raise ValueError(f"node {i} has parent {parent}: parents must come before their children (-1 = root)")
        if parent >= 0:
            allowed[i] |= allowed[parent]
    return allowed


def _check_tree_args(n_nodes: int, top_k: int, depth: int) -> None:
    for name, value in (("n_nodes", n_nodes), ("top_k", top_k), ("depth", depth)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    if n_nodes > sum(top_k ** d for d in range(1, depth + 1)):
        raise ValueError(f"a tree of depth {depth} with {top_k} children per node has fewer than {n_nodes} nodes: "
                         "raise depth or top_k")


@torch.no_grad()
def draft_tree(head: DraftHead, features: torch.Tensor, tokens: torch.Tensor, cache: DynamicCache, *,
               n_nodes: int, top_k: int, depth: int) -> DraftTree:
    """EAGLE-2's dynamic draft tree after a verified prefix (greedy drafting, temperature 0).

    ``features`` (T, d), or (T, k·d) for a fused head: the expert's features at positions 0..T-1; ``tokens``
    (T+1,): the verified tokens, the last one the root; ``cache``: the head's KV cache over the first positions
    (empty at first). The head reads
    the true features it has not read yet (one pass, as :class:`helpers.heads.HeadDrafter` does each round), then
    makes ``depth - 1`` expansion passes: the ``top_k`` nodes of the newest level with the highest path
    probability, each fed with its parent's predicted feature under the tree mask, give ``top_k`` children each.
    Of all nodes, the ``n_nodes`` with the highest path probability are kept: a node's probability never exceeds
    its parent's, so they form a tree. The cache is cropped back to the T true positions."""
    _check_tree_args(n_nodes, top_k, depth)
    length = features.shape[0]
    if tokens.shape != (length + 1,):
        raise ValueError(f"tokens must hold the T + 1 = {length + 1} verified tokens, got shape {tuple(tokens.shape)}")
    read = cache.get_seq_length()
    if not 0 <= read < length:
        raise ValueError(f"the head's cache holds {read} positions; it must hold fewer than the {length} features")
    root = head(features[None, read:], tokens[None, read + 1:], cache, start=read)[0, -1]
    # candidate: (path probability, parent candidate or -1, token, level); its predicted feature once expanded
    candidates: list[tuple[float, int, int, int]] = []
    outputs: dict[int, torch.Tensor] = {-1: root}
    slot: dict[int, int] = {}  # expanded candidate -> its key's index in the cache, after the T true positions
    frontier = [-1]
    for level in range(1, depth + 1):
        for parent in frontier:
            base = 1.0 if parent < 0 else candidates[parent][0]
            top = torch.topk(torch.softmax(head.logits(outputs[parent]).float(), dim=-1), top_k)
            candidates += [(base * float(p), parent, int(head.vocab[i]), level)
                           for p, i in zip(top.values, top.indices, strict=True)]
        if level == depth:
            break
        newest = [i for i, c in enumerate(candidates) if c[3] == level]
        frontier = sorted(newest, key=lambda i: -candidates[i][0])[:top_k]
        done = len(slot)
        allowed = torch.zeros(len(frontier), length + done + len(frontier), dtype=torch.bool)
        allowed[:, :length] = True
        for row, node in enumerate(frontier):
            allowed[row, length + done + row] = True
            parent = candidates[node][1]
            while parent >= 0:
                allowed[row, length + slot[parent]] = True
                parent = candidates[parent][1]
        inputs = torch.stack([outputs[candidates[node][1]] for node in frontier])[None]
        ids = torch.tensor([[candidates[node][2] for node in frontier]], device=inputs.device)
        positions = torch.full((len(frontier),), length - 1 + level, device=inputs.device)
        predicted = head(inputs, ids, cache, allowed=allowed.to(inputs.device), positions=positions)[0]
        for row, node in enumerate(frontier):
            slot[node], outputs[node] = done + row, predicted[row]
    if slot:
        cache.crop(-len(slot))
    # highest path probability first; on a tie the shallower node, so a kept node's parent is always kept
    kept = sorted(range(len(candidates)), key=lambda i: (-candidates[i][0], candidates[i][3]))[:n_nodes]
    kept.sort(key=lambda i: (candidates[i][3], -candidates[i][0]))  # parents before children
    index = {node: i for i, node in enumerate(kept)}
    tree = DraftTree()
    for node in kept:
        score, parent, token, level = candidates[node]
        tree.tokens.append(token)
        tree.parents.append(index[parent] if parent >= 0 else -1)
        tree.depths.append(level)
        tree.scores.append(score)
    return tree


def accepted_path(tree: DraftTree, continuation: Sequence[int]) -> list[int]:
    """Greedy tree verification: the nodes of the longest root path whose tokens equal ``continuation`` (the
    expert's greedy tokens after the root), from depth 1 down: the drafted tokens the expert keeps (it then adds
    one token of its own)."""
    best: list[int] = []
    matched: dict[int, list[int]] = {-1: []}
    for i, (token, parent) in enumerate(zip(tree.tokens, tree.parents, strict=True)):
        path = matched.get(parent)
        if path is not None and len(path) < len(continuation) and continuation[len(path)] == token:
            matched[i] = [*path, i]
            best = max(best, matched[i], key=len)
    return best


def accepted_depth(tree: DraftTree, continuation: Sequence[int]) -> int:
    """How many drafted tokens greedy tree verification keeps: the length of :func:`accepted_path`."""
    return len(accepted_path(tree, continuation))


class TreeVerifyStep:
    """One expert pass over the root + a tree's nodes under the tree mask, after a cached prefix, undone after each
    call; its time over a 1-token step (:class:`helpers.timing.ForwardStep`) is r_tree(n), the verification
    cost. It returns the logits at the root and at every node: the expert's next-token choice after each path."""

    def __init__(self, model: PreTrainedModel, input_ids: torch.Tensor, parents: Sequence[int],
                 tokens: Sequence[int] | None = None) -> None:
        """``input_ids`` (1, T): the prompt, its last token the root (the cache holds the T - 1 before it);
        ``tokens``: the nodes' tokens (default: the root token again; the time does not depend on them)."""
        if input_ids.shape[1] < 2:
            raise ValueError("timing a tree verification needs a prompt of at least 2 tokens")
        self.model, self.n = model, len(parents) + 1
        self.cache = DynamicCache(config=model.config)
        with torch.no_grad():
            model(input_ids[:, :-1], past_key_values=self.cache, use_cache=True)
        self.prefix = input_ids.shape[1] - 1
        nodes = input_ids[:, -1:].repeat(1, len(parents)) if tokens is None else input_ids.new_tensor([list(tokens)])
        self.ids = torch.cat([input_ids[:, -1:], nodes], dim=1)
        self.mask, self.positions = tree_inputs(parents, self.prefix, dtype=model.dtype)
        self._kwargs = ({"logits_to_keep": self.n}
                        if "logits_to_keep" in inspect.signature(model.forward).parameters else {})

    @torch.no_grad()
    def __call__(self) -> torch.Tensor:
        logits = self.model(self.ids, attention_mask=self.mask, position_ids=self.positions,
                            past_key_values=self.cache, use_cache=True, **self._kwargs).logits
        self.cache.crop(-self.n)
        return logits


def tree_inputs(parents: Sequence[int], prefix: int, dtype: torch.dtype = torch.float32,
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """The 4D additive attention mask (1, 1, n+1, prefix+n+1) and position ids (1, n+1) of an expert pass over the
    root token (at position prefix) and the tree's n nodes (node at depth k: position prefix + k), after a cache
    holding ``prefix`` positions: every row sees the prefix, the root, its ancestors and itself."""
    n = len(parents)
    allowed = torch.zeros(n + 1, prefix + n + 1, dtype=torch.bool)
    allowed[:, :prefix + 1] = True
    allowed[1:, prefix + 1:] = tree_attention(parents)
    depth = torch.zeros(n + 1, dtype=torch.long)
    for i, parent in enumerate(parents):
        depth[i + 1] = depth[parent + 1] + 1
    mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
    return mask[None, None], (prefix + depth)[None]


# ------------------------------------------------------------------------------------------ the decoder
@dataclass(frozen=True)
class TreeShape:
    """A draft of ``n_nodes`` nodes: ``top_k`` children per expanded node, at most ``depth`` levels (top_k = 1 and
    n_nodes = depth = γ is the chain of :func:`helpers.heads.head_speculative`)."""

    n_nodes: int
    top_k: int
    depth: int

    @property
    def name(self) -> str:
        if self.top_k == 1:
            return f"chain γ={self.depth}"
        return f"tree {self.n_nodes} nodes (top-{self.top_k}, depth {self.depth})"


SHAPES = (TreeShape(2, 1, 2), TreeShape(3, 1, 3), TreeShape(4, 1, 4), TreeShape(4, 2, 3), TreeShape(8, 2, 4),
          TreeShape(8, 4, 4), TreeShape(12, 4, 5), TreeShape(16, 4, 6))
"""Notebook 07's chains and trees of 4-16 nodes (EAGLE-2 itself drafts 60 nodes, top-10, depth 6, on a GPU)."""


@dataclass
class TreeRound:
    """One round of :func:`tree_speculative`: the tree the head drafted, the nodes the expert kept (a root path,
    from depth 1 down) and the tokens the round adds (the kept nodes' tokens, then the expert's own token)."""

    tree: DraftTree
    path: list[int]
    emitted: list[int]


def compact(cache: DynamicCache, keep: torch.Tensor) -> None:
    """Keep only the cached positions ``keep`` (ascending indices) in every layer of ``cache``: after a tree pass,
    the prefix, the root and the accepted path, whose keys were computed at exactly the positions they now hold
    (a node at depth k sits at position prefix + k, and the accepted path is one node per depth)."""
    for layer in cache.layers:
        layer.keys = layer.keys[:, :, keep]
        layer.values = layer.values[:, :, keep]


@torch.no_grad()
def tree_speculative(expert: PreTrainedModel, head: DraftHead, input_ids: torch.Tensor, *, max_new_tokens: int,
                     shape: TreeShape, eos_token_id: EosIds = None) -> Generation:
    """Greedy speculative decoding with EAGLE-2's draft trees (Li et al. 2024, Sec. 4): the head drafts a tree
    (:func:`draft_tree`), the expert scores the root and every node in **one** pass under the tree mask
    (:func:`tree_inputs`), and greedy verification walks down from the root while the expert's own choice after a
    node is one of its children. The round adds the walked nodes' tokens and the expert's choice after the last
    one, so every emitted token is the expert's argmax after its own prefix: the output is greedy decoding's (in
    exact arithmetic; in floating point a tree pass and a 1-token step can round a near-tie apart, as for chains).
    The expert's cache is then compacted to prefix + root + walked path (:func:`compact`), and the features of
    those positions, from the same pass, are what the head reads next round. The first call reads the prompt and
    drafts nothing, as in :func:`helpers.heads.head_speculative`; ``shape = TreeShape(γ, 1, γ)`` is its chain.
    Greedy only: sampling from a tree needs a recursive rejection rule over siblings (SpecInfer, EAGLE-2), not
    built here. ``stats.amateur_calls`` counts head passes, ``trace`` holds a :class:`TreeRound` per round."""
    check_inputs([expert], input_ids, max_new_tokens, temperature=0.0, rollback=True)
    check_attached(head, expert)
    _check_tree_args(shape.n_nodes, shape.top_k, shape.depth)
    eos = _eos_set(eos_token_id)
    stats, trace = Stats(), []
    if max_new_tokens == 0:
        return Generation([], stats, trace)
    keep = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(expert.forward).parameters else {}
    cache = DynamicCache(config=expert.config)
    out = expert(input_ids, past_key_values=cache, use_cache=True, output_hidden_states=True, **keep)
    stats.expert_calls = 1
    features = expert_features(out.hidden_states, head.feature_layers)[0]
    new = [int(out.logits[0, -1].argmax())]
    tokens = torch.cat([input_ids[0], input_ids.new_tensor(new)])
    head_cache = DynamicCache(config=head.config)
    while len(new) < max_new_tokens and new[-1] not in eos:
        tree = draft_tree(head, features, tokens, head_cache, n_nodes=shape.n_nodes, top_k=shape.top_k,
                          depth=shape.depth)
        stats.amateur_calls += shape.depth  # one pass reads the new features, depth - 1 expand the tree
        prefix = cache.get_seq_length()
        mask, positions = tree_inputs(tree.parents, prefix, dtype=expert.dtype)
        ids = input_ids.new_tensor([[int(tokens[-1]), *tree.tokens]])
        out = expert(ids, attention_mask=mask.to(ids.device), position_ids=positions.to(ids.device),
                     past_key_values=cache, use_cache=True, output_hidden_states=True)
        stats.expert_calls += 1
        choices = out.logits[0].argmax(dim=-1).tolist()  # the expert's token after the root and after every node
        children = {(parent, token): i for i, (parent, token) in enumerate(zip(tree.parents, tree.tokens,
                                                                               strict=True))}
        path: list[int] = []
        emitted: list[int] = []
        node = -1
        while True:
            emitted.append(choices[node + 1])
            if emitted[-1] in eos or len(new) + len(emitted) == max_new_tokens or (node, emitted[-1]) not in children:
                break
            node = children[node, emitted[-1]]
            path.append(node)
        rows = torch.tensor([0, *(i + 1 for i in path)], device=ids.device)
        compact(cache, torch.cat([torch.arange(prefix, device=ids.device), prefix + rows]))
        features = torch.cat([features, expert_features(out.hidden_states, head.feature_layers)[0, rows]])
        tokens = torch.cat([tokens, tokens.new_tensor(emitted)])
        new += emitted
        stats.proposed += len(tree)
        stats.accepted += len(path)
        stats.accepted_per_iteration.append(len(path))
        trace.append(TreeRound(tree, path, emitted))
    return Generation(new, stats, trace)


# ------------------------------------------------------------------------------------------ measurement

def _features(expert: PreTrainedModel, head: DraftHead, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return expert_features(expert(ids, output_hidden_states=True).hidden_states, head.feature_layers)[0]


def tree_rounds(expert: PreTrainedModel, head: DraftHead, input_ids: torch.Tensor, continuation: Sequence[int],
                shape: TreeShape, features: torch.Tensor | None = None) -> list[int]:
    """Greedy tree decoding of ``continuation`` (the expert's greedy tokens after ``input_ids``), simulated: the
    tokens each expert call keeps, ``1 + accepted depth``; the first call reads the prompt and drafts nothing, as
    in :func:`helpers.heads.head_speculative`. The features come from one pass over the whole sequence (or are
    given: ``features`` of prompt + continuation), which in exact arithmetic equals what the real verification
    passes return."""
    full = torch.cat([input_ids[0], torch.tensor(continuation, device=input_ids.device)])
    if features is None:
        features = _features(expert, head, full[None])
    cache = DynamicCache(config=head.config)
    known, kept = input_ids.shape[1], [1]
    while sum(kept) < len(continuation):
        tree = draft_tree(head, features[:known], full[:known + 1], cache, n_nodes=shape.n_nodes,
                          top_k=shape.top_k, depth=shape.depth)
        remaining = len(continuation) - sum(kept)
        kept.append(min(1 + accepted_depth(tree, full[known + 1:].tolist()), remaining))
        known += kept[-1]
    return kept


class TreeDraftStep:
    """One round of the head's tree drafting after a cached prompt (read one verified position, expand, crop back),
    timed like :class:`helpers.timing.ForwardStep`: the draft cost of a round, in expert steps once divided."""

    def __init__(self, expert: PreTrainedModel, head: DraftHead, input_ids: torch.Tensor, shape: TreeShape) -> None:
        if input_ids.shape[1] < 2:
            raise ValueError("timing a tree draft needs a prompt of at least 2 tokens")
        self.head, self.shape = head, shape
        self.tokens = torch.cat([input_ids[0], input_ids[0, -1:]])  # a root token after the prompt (any will do)
        self.features = _features(expert, head, input_ids)
        self.cache = DynamicCache(config=head.config)
        with torch.no_grad():
            head(self.features[None, :-1], self.tokens[None, 1:-1], self.cache)
        self.tree = self()

    def __call__(self) -> DraftTree:
        tree = draft_tree(self.head, self.features, self.tokens, self.cache, n_nodes=self.shape.n_nodes,
                          top_k=self.shape.top_k, depth=self.shape.depth)
        self.cache.crop(-1)
        return tree


def measure(expert: PreTrainedModel, head: DraftHead, prompts: Sequence[torch.Tensor], *, max_new_tokens: int,
            shapes: Sequence[TreeShape] = SHAPES, repeats: int = 30, progress: bool = True) -> dict:
    """Chains and trees side by side on the same greedy continuations: tokens per expert call (pooled, and per
    prompt for an interval), the draft cost per round and r_tree (timed on the longest prompt, interleaved with
    an expert step), and the speedup they explain, n / (1 + Σ_later rounds (draft + r_tree)) in expert steps."""
    continuations = [naive(expert, ids, max_new_tokens=max_new_tokens, temperature=0.0).new_token_ids
                     for ids in tqdm(prompts, desc="greedy continuations", unit="prompt", disable=not progress)]
    longest = max(prompts, key=lambda ids: ids.shape[1])
    steps: dict[str, Callable[[], object]] = {"expert": ForwardStep(expert, longest, 1)}
    for shape in shapes:
        draft = TreeDraftStep(expert, head, longest, shape)
        steps[f"draft {shape.name}"] = draft
        steps[f"verify {shape.name}"] = TreeVerifyStep(expert, longest, draft.tree.parents)
    times = interleaved(steps, repeats, warmup=3)
    ratio = {name: median([t / e for t, e in zip(ts, times["expert"], strict=True)]) for name, ts in times.items()}
    features = [_features(expert, head, torch.cat([ids[0], torch.tensor(cont, device=ids.device)])[None])
                for ids, cont in zip(prompts, continuations, strict=True)]
    rows = []
    for shape in tqdm(shapes, desc="tree rounds", unit="shape", disable=not progress):
        kept = [tree_rounds(expert, head, ids, cont, shape, feats)
                for ids, cont, feats in zip(prompts, continuations, features, strict=True)]
        tokens, calls = sum(map(sum, kept)), sum(map(len, kept))
        draft, verify = ratio[f"draft {shape.name}"], ratio[f"verify {shape.name}"]
        rows.append({"shape": asdict(shape), "name": shape.name, "tokens_per_call": tokens / calls,
                     "tokens_per_call_by_prompt": [sum(k) / len(k) for k in kept],
                     "mean_accepted_depth": sum(sum(k) - len(k) for k in kept) / calls,
                     "draft_cost": draft, "r_tree": verify,
                     "explained_speedup": tokens / sum(1 + (len(k) - 1) * (draft + verify) for k in kept)})
    return {"rows": rows, "expert_step_ms": 1000 * median(times["expert"]), "max_new_tokens": max_new_tokens,
            "n_prompts": len(prompts), "repeats": repeats, "timing_prompt_tokens": longest.shape[1],
            "note": "tokens per call from greedy tree verification against the expert's greedy continuation "
                    "(simulated: no tree decoder); draft_cost and r_tree in expert 1-token steps"}


def explained_by_prompt(result: dict, row: dict) -> list[float]:
    """Each prompt's explained speedup n / (1 + (calls - 1)(draft cost + r_tree)) for one row of :func:`measure`,
    with the timed costs held fixed (they come from one prompt): what the shape's tokens per call buy, prompt by
    prompt, for a paired interval between two shapes. Every continuation has ``max_new_tokens`` tokens (greedy, no
    EOS), so a prompt's expert calls are n / its tokens per call, and the row's pooled ``explained_speedup`` is
    their harmonic mean."""
    n, step = result["max_new_tokens"], row["draft_cost"] + row["r_tree"]
    return [n / (1 + (n / tokens - 1) * step) for tokens in row["tokens_per_call_by_prompt"]]


def markdown_table(result: dict) -> str:
    """The measurement as a Markdown table, chains first."""
    lines = ["| draft | nodes | tokens / expert call | draft cost per round | r_tree | explained speedup |",
             "|---|---:|---:|---:|---:|---:|"]
    for row in result["rows"]:
        lines.append(f"| {row['name']} | {row['shape']['n_nodes']} | {row['tokens_per_call']:.2f} | "
                     f"{row['draft_cost']:.2f} | {row['r_tree']:.2f} | {row['explained_speedup']:.2f}× |")
    return "\n".join(lines)


def best_tree_over_best_chain(result: dict) -> tuple[dict, dict, Interval]:
    """The simulation's best chain and best tree (by explained speedup) and the tree's gain over the chain, prompt by
    prompt with the timed costs held fixed (:func:`explained_by_prompt`), as a mean with its interval over prompts."""
    chain = max((row for row in result["rows"] if row["shape"]["top_k"] == 1), key=lambda row: row["explained_speedup"])
    tree = max((row for row in result["rows"] if row["shape"]["top_k"] > 1), key=lambda row: row["explained_speedup"])
    gain = mean_of([t - c for t, c in zip(explained_by_prompt(result, tree), explained_by_prompt(result, chain),
                                          strict=True)])
    return chain, tree, gain


def simulation_readme_cells(result: dict) -> str:
    """The README's result and command cells of a simulation file (:func:`measure`), rendered from it: the trees'
    and the chains' tokens per expert call, the trees' r_tree, draft cost and explained speedup (ranges), the best
    chain, and the best tree's gain over it; a test finds them in the README after the row's typed description."""
    trees = [row for row in result["rows"] if row["shape"]["top_k"] > 1]
    chains = [row for row in result["rows"] if row["shape"]["top_k"] == 1]

    def span(rows: Sequence[dict], key: str) -> str:
        values = [row[key] for row in rows]
        return f"{min(values):.2f}–{max(values):.2f}"

    chain, _, gain = best_tree_over_best_chain(result)
    return (f"| tokens per expert call {span(trees, 'tokens_per_call')} (chains {span(chains, 'tokens_per_call')}), "
            f"r_tree {span(trees, 'r_tree')} and draft cost {span(trees, 'draft_cost')} expert steps: explained "
            f"speedup {span(trees, 'explained_speedup')}× vs {chain['explained_speedup']:.2f}× for the best chain "
            f"({chain['name']}); best tree − best chain {gain} over the {result['n_prompts']} prompts, with the costs "
            f"timed on one prompt held fixed | `{result['command']}` |")


# ------------------------------------------------------------------------------- the decoder, timed
DECODE_SHAPES = (TreeShape(4, 2, 3), TreeShape(8, 2, 4))
"""The trees :func:`decode_speed` times: the best tree of the committed bf16 simulation on the AMD EPYC and the
next larger one (chosen on the article's and the tutorial's raw prompts, not on the requests it is timed on)."""
DECODE_CHAINS = (1, 3)
"""The head's chains it times beside them (:func:`helpers.heads.head_speculative`): γ = 1, the speed protocol's
choice for the head on that path, and γ = 3, the simulation's best chain."""


def decode_configs(pair: Pair, head: DraftHead, *, max_new_tokens: int, eos: bool = True,
                   chains: Sequence[int] = DECODE_CHAINS, shapes: Sequence[TreeShape] = DECODE_SHAPES,
                   ) -> dict[str, Decoder]:
    """Greedy naive decoding, the head's chains and its trees, as configurations of the speed protocol (``eos``:
    stop at the pair's EOS token, as a chat does; off, every run writes ``max_new_tokens`` tokens)."""
    common = {"max_new_tokens": max_new_tokens, "eos_token_id": pair.eos_token_id if eos else None}
    configs: dict[str, Decoder] = {"naive": lambda ids, seed: naive(pair.expert, ids, temperature=0.0, **common)}
    for gamma in chains:
        configs[f"chain γ={gamma}"] = (lambda ids, seed, g=gamma:
                                       head_speculative(pair.expert, head, ids, gamma=g, temperature=0.0, **common))
    for shape in shapes:
        configs[shape.name] = (lambda ids, seed, sh=shape:
                               tree_speculative(pair.expert, head, ids, shape=sh, **common))
    return configs


def decode_speed(pair: Pair, head: DraftHead, prompts: Sequence[torch.Tensor], *, max_new_tokens: int, rounds: int,
                 eos: bool = True, chains: Sequence[int] = DECODE_CHAINS, shapes: Sequence[TreeShape] = DECODE_SHAPES,
                 progress: bool = True) -> list[dict]:
    """The tree decoder timed with the speed protocol (:func:`helpers.protocol.timed_runs`: a warm-up, then every
    configuration once per prompt and round in a shuffled order), beside greedy naive decoding and the head's
    chains: the raw records."""
    configs = decode_configs(pair, head, max_new_tokens=max_new_tokens, eos=eos, chains=chains, shapes=shapes)
    return timed_runs(configs, prompts, rounds=rounds, progress=progress)


def decode_summary(result: dict) -> list[dict]:
    """One row per configuration but naive decoding: its speedup over greedy naive decoding (the protocol's paired
    mean over requests with its interval; a point estimate below :data:`helpers.protocol.MIN_PROMPTS` requests),
    its tokens per expert call (all its timed decodes pooled) and how many of its timed texts (one per request
    and timing round) are naive decoding's."""
    records, settings = result["records"], result["settings"]
    timed = {rec["config"] for rec in records}
    names = [name for name in [f"chain γ={gamma}" for gamma in settings["chains"]]
             + [TreeShape(**shape).name for shape in settings["shapes"]] if name in timed]
    rows = []
    for name in names:
        runs = [rec for rec in records if rec["config"] == name]
        n_prompts = len({rec["prompt"] for rec in runs})
        ratio = speedup(records, "naive", name) if n_prompts >= MIN_PROMPTS else mean_speedup(records, "naive", name)
        same, of = same_text(records, "naive", name)
        rows.append({"config": name, "speedup": ratio, "prompts": n_prompts, "same_text": same, "runs": of,
                     "tokens_per_call": sum(len(r["tokens"]) for r in runs) / sum(r["expert_calls"] for r in runs)})
    return rows


def ratio_text(ratio: Interval | float, prompts: int) -> str:
    """``1.16× [1.12, 1.21]`` (``1.06× [1.003, 1.12]`` near 1), or a point estimate labelled as such (fewer than
    MIN_PROMPTS requests)."""
    if isinstance(ratio, Interval):
        return interval_text(ratio)
    return f"{ratio:.2f}× (point estimate, {prompts} requests)"


def decode_table(result: dict) -> str:
    """:func:`decode_summary` as a Markdown table."""
    lines = ["| decoder | tokens / expert call | speedup over greedy naive decoding | timed texts equal to naive "
             "decoding's (one per request and timing round) |",
             "|---|---:|---:|---:|"]
    for row in decode_summary(result):
        ratio = ratio_text(row["speedup"], row["prompts"])
        same = f"{row['same_text']} of {row['runs']}"
        lines.append(f"| {row['config']} | {row['tokens_per_call']:.2f} | {ratio} | {same} |")
    return "\n".join(lines)


def tree_over_chains(result: dict) -> dict[tuple[str, str], Interval | float]:
    """(tree, chain) -> the tree's speedup over the chain, paired by request as every protocol speedup (above 1: the
    tree decoder is faster), with its interval from :data:`helpers.protocol.MIN_PROMPTS` requests on."""
    records, rows = result["records"], decode_summary(result)
    names = [row["config"] for row in rows]
    chains = [name for name in names if name.startswith("chain")]
    out: dict[tuple[str, str], Interval | float] = {}
    for tree in (name for name in names if not name.startswith("chain")):
        for chain in chains:
            enough = rows[names.index(tree)]["prompts"] >= MIN_PROMPTS
            out[tree, chain] = speedup(records, chain, tree) if enough else mean_speedup(records, chain, tree)
    return out


def readme_row(result: dict) -> str:
    """The README's row for a ``--decode`` result file (a test checks that the README holds it verbatim)."""
    s, rows = result["settings"], decode_summary(result)
    prompts = (f"{len(result['prompts'])} held-out chat requests, chat template, EOS on" if s["chat_template"]
               else f"the first {len(result['prompts'])} raw prompts of the simulation, EOS off")
    where = notebooks_reading(result)
    what = (f"**the tree decoder** ({where + '; ' if where else ''}greedy; {prompts}, up to {s['max_new_tokens']} "
            f"tokens, {s['rounds']} shuffled timing rounds, one run; speedup over naive decoding on the same "
            f"{path_name(s)} path [95 % CI])")
    decoders = "; ".join(f"{row['config']} {ratio_text(row['speedup'], row['prompts'])} ({row['tokens_per_call']:.2f} "
                         f"tokens per expert call, {row['same_text']} of {row['runs']} texts naive decoding's)"
                         for row in rows)
    pairs = "; ".join(f"{tree} over {chain} {ratio_text(ratio, len(result['prompts']))}"
                      for (tree, chain), ratio in tree_over_chains(result).items())
    return f"| {what} | {result['machine']['cpu_kind']} | {decoders} — {pairs} | `{result['command']}` |"


def main(argv: Sequence[str] | None = None) -> dict:
    """``python -m helpers.trees``: chains and trees of the committed head on the article's and the tutorial's raw
    prompts, simulated (notebook 07's committed measurement); with ``--decode``, the tree decoder itself timed by
    the speed protocol on the held-out chat requests (chat template, EOS on) beside greedy naive decoding and the
    head's chains. ``--kernels``/``--dtype`` choose the execution path of the expert and the head
    (:mod:`helpers.kernels`; bf16 only where the CPU has bf16 instructions), and every cost is in steps of the
    expert on that same path."""
    parser = argparse.ArgumentParser(prog="python -m helpers.trees", description=main.__doc__.split("\n")[0])
    parser.add_argument("--decode", action="store_true",
                        help="time the tree decoder by the speed protocol instead of simulating trees")
    parser.add_argument("--raw", action="store_true",
                        help="with --decode: the simulation's raw prompts, EOS off, instead of held-out chat requests")
    parser.add_argument("--n-prompts", type=int, default=None,
                        help="the first N prompts (default: all 65 raw prompts; with --decode 20)")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="default 64; with --decode 48 (--raw: 64)")
    parser.add_argument("--repeats", type=int, default=30, help="interleaved timing rounds of the costs (default 30)")
    parser.add_argument("--rounds", type=int, default=3, help="with --decode: shuffled timing rounds (default 3)")
    parser.add_argument("--out", type=Path, default=Path("output/trees.json"))
    parser.add_argument("--kernels", choices=KERNELS, default="eager", help="the models' execution path")
    parser.add_argument("--dtype", choices=tuple(DTYPES), default="fp32", help="the models' weights")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    if args.raw and not args.decode:
        parser.error("--raw chooses the prompts of --decode; the simulation always uses the raw prompts")
    try:
        pair, head = load(args.kernels, args.dtype)
    except ValueError as error:
        parser.error(str(error))
    chat = args.decode and not args.raw
    texts = split(read_prompts(EVAL_PROMPTS))[1] if chat else read_prompts(ARTICLE_PROMPTS) + read_prompts(PROMPTS)
    n_prompts = args.n_prompts if args.n_prompts is not None else (MIN_PROMPTS if args.decode else len(texts))
    if not 1 <= n_prompts <= len(texts):
        parser.error(f"--n-prompts must be in 1..{len(texts)}")
    max_new_tokens = args.max_new_tokens if args.max_new_tokens is not None else (48 if chat else 64)
    meta = {"command": shlex.join(["python", "-m", "helpers.trees", *(argv if argv is not None else sys.argv[1:])]),
            "machine": machine_info(pair.expert.device),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    prompts = [pair.encode_chat(text) if chat else pair.encode(text) for text in texts[:n_prompts]]
    if args.decode:
        started = datetime.datetime.now()
        records = decode_speed(pair, head, prompts, max_new_tokens=max_new_tokens, rounds=args.rounds, eos=chat,
                               progress=not args.no_progress)
        selection = ("every other line, from the first (speed.split)" if chat
                     else "the article's prompts, then data/prompts.txt, in order")
        result = {"records": records, "seconds": (datetime.datetime.now() - started).total_seconds(),
                  "settings": {"kernels": args.kernels, "dtype": args.dtype, "max_new_tokens": max_new_tokens,
                               "rounds": args.rounds, "prompts_file": EVAL_PROMPTS.name if chat else PROMPTS.name,
                               "chat_template": chat, "eos": chat, "prompt_selection": selection,
                               "chains": list(DECODE_CHAINS), "shapes": [asdict(shape) for shape in DECODE_SHAPES]},
                  "prompts": texts[:n_prompts], **meta}
        print(f"{path_name(result['settings'])} path\n{decode_table(result)}")
        for (tree, chain), ratio in tree_over_chains(result).items():
            print(f"{tree} over {chain}: {ratio_text(ratio, n_prompts)}")
    else:
        result = measure(pair.expert, head, prompts, max_new_tokens=max_new_tokens, repeats=args.repeats,
                         progress=not args.no_progress)
        result |= {"settings": {"kernels": args.kernels, "dtype": args.dtype}, **meta}
        print(f"{path_name(result['settings'])} path\n{markdown_table(result)}")
    print(f"written to {write_json(result, args.out)}")
    return result

if __name__ == "__main__":
    main()
