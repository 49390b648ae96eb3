"""helpers.plots: every picture draws from real decoder output, and save() writes where it is told."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest
import torch
from matplotlib.figure import Figure

from helpers import plots
from helpers.decoding import contrastive, speculative
from helpers.trees import DraftTree


def test_pictures_of_decoder_traces(tiny_text_pair, prompt, capsys):
    pair = tiny_text_pair
    spec = speculative(pair.expert, pair.amateur, prompt, max_new_tokens=12, gamma=3,
                       generator=torch.Generator().manual_seed(0))
    cd = contrastive(pair.expert, pair.amateur, prompt, max_new_tokens=2)
    p = torch.softmax(torch.randn(12), -1)
    figures = [
        plots.next_token_bars(pair.tokenizer, p, p.flip(0), k=5),
        plots.contrastive_step(pair.tokenizer, cd.trace[0], alpha=0.1),
        plots.speculative_iterations(pair.tokenizer, spec.trace),
        plots.distribution_check(p, {"a": p, "b": p.flip(0)}, [str(i) for i in range(12)]),
        plots.sweep([0.1, 0.01], {"x": [1, 2], "y": [3, 4]}, xlabel="α", log_x=True),
        plots.speedup_surface([0.1, 0.9], r=1.5, points=[(0.5, 2, 0.9, "here")]),
    ]
    assert all(isinstance(f, Figure) for f in figures)
    assert plots.speculative_stepper(pair.tokenizer, spec.trace, interactive=False) is None
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(spec.trace) and lines[0].startswith("#1: drafted 3")
    assert plots.show_token(pair.tokenizer, 3) == "w1"


def test_describe_iteration_names_what_happened(tiny_text_pair, prompt):
    spec = speculative(tiny_text_pair.expert, tiny_text_pair.amateur, prompt, max_new_tokens=30, gamma=2,
                       generator=torch.Generator().manual_seed(1))
    texts = [plots.describe_iteration(tiny_text_pair.tokenizer, it) for it in spec.trace]
    assert any("rejected" in t and "resampled" in t for t in texts)
    assert any("bonus" in t for t in texts)


def test_quality_and_speed_pictures():
    table = {"greedy": {"diversity": (0.5, 0.4, 0.6), "perplexity": (3.0, 2.5, 3.8)},
             "contrastive α=0.1": {"diversity": (0.9, 0.85, 1.0), "perplexity": (8.0, 6.0, 9.0)}}
    assert isinstance(plots.quality_bars(table, ["diversity", "perplexity"]), Figure)
    assert isinstance(plots.forward_cost({1: 1.0, 2: 1.9, 4: 2.0}), Figure)
    by_context = {0: {1: (1.0, 1.0, 1.0), 2: (1.6, 1.5, 1.8)}, 32: {1: (1.0, 1.0, 1.0), 2: (1.7, 1.5, 1.9)}}
    assert isinstance(plots.forward_cost_by_context(by_context), Figure)
    result = {"configurations": [
        {"name": "naive", "method": "naive", "gamma": None, "per_token_s": {"median": 0.05}},
        {"name": "naive_nocache", "method": "naive", "gamma": None, "per_token_s": {"median": 0.1}},
        {"name": "speculative_g1", "method": "speculative", "gamma": 1, "per_token_s": {"median": 0.08}},
        {"name": "speculative_g2", "method": "speculative", "gamma": 2, "per_token_s": {"median": 0.09}}]}
    assert isinstance(plots.speed_by_gamma(result), Figure)


def test_save_writes_png_only_when_asked(tmp_path, monkeypatch):
    fig = plots.sweep([1, 2], {"x": [1, 2]}, xlabel="n")
    monkeypatch.delenv("BIG_SMALL_FIGURES", raising=False)
    plots.save(fig, "nothing")
    assert not list(tmp_path.iterdir())
    monkeypatch.setenv("BIG_SMALL_FIGURES", str(tmp_path / "figs"))
    plots.save(fig, "sweep")
    assert (tmp_path / "figs" / "sweep.png").stat().st_size > 1000


def test_speedup_surface_orders_panels_by_c_and_takes_r_per_gamma():
    fig = plots.speedup_surface([0.9, 0.1], r={1: 1.2, 2: 1.6, 4: 1.8}, points=[(0.5, 2, 0.1, "here")])
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    assert [ax.get_title().split(",")[0] for ax in panels] == ["c = 0.1", "c = 0.9"]
    assert "1.20–1.80" in panels[0].get_title()
    assert [t.get_text() for t in panels[0].texts] == ["here"]


def test_kv_cache_states_draws_both_endings_and_refuses_a_bad_count():
    fig = plots.kv_cache_states(gamma=4, accepted=1)
    assert [ax.get_title() for ax in fig.axes] == ["draft x2 rejected, y resampled", "all γ drafts accepted, bonus b"]
    assert len(fig.axes[0].patches) == 2 * (3 + 4 + 1)
    with pytest.raises(ValueError, match=r"accepted must be in 0\.\.gamma-1"):
        plots.kv_cache_states(gamma=4, accepted=4)


def test_head_architecture_and_draft_tree_pictures(tiny_text_pair):
    fig = plots.head_architecture(hidden=576, layers=30, vocab=49152, draft_vocab=8192)
    shown = " ".join(t.get_text() for t in fig.axes[0].texts)
    assert "30 decoder layers" in shown and "(8,192)" in shown and "1152 → 576" in shown
    tree = DraftTree(tokens=[3, 5, 7, 2], parents=[-1, -1, 0, 0], depths=[1, 1, 2, 2], scores=[0.6, 0.3, 0.4, 0.1])
    fig = plots.draft_tree(tiny_text_pair.tokenizer, tree, accepted=[0, 2])
    tree_ax, mask_ax = fig.axes
    assert len(tree_ax.texts) == 5 and "0.40" in tree_ax.texts[3].get_text()
    mask = mask_ax.images[0].get_array()
    assert mask.shape == (5, 5) and mask[3, 1] == 1 and mask[3, 2] == 0  # node 2 sees node 0 (its parent), not 1


def test_roofline_draws_every_path():
    paths = {name: {"step_seconds": step, "limit_seconds": 0.01, "r": {"1": 1.0, "2": 1.4, "3": 1.2}}
             for name, step in (("fp32 eager", 0.07), ("int8", 0.04))}
    fig = plots.roofline(paths, title="t")
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    assert [line.get_label() for line in fig.axes[1].get_lines()][:2] == ["fp32 eager", "int8"]
