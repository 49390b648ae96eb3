"""The notebooks' pictures. Each function draws one figure and returns it; ``save`` also writes it to the folder
named by ``$BIG_SMALL_FIGURES`` (``make tutorial`` sets it to output/figures)."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from helpers.decoding import ContrastiveStep, SpecIteration
from helpers.trees import DraftTree, tree_attention

COLORS = {"expert": "#1f77b4", "amateur": "#ff7f0e", "accepted": "#2ca02c", "rejected": "#d62728",
          "resampled": "#9467bd", "bonus": "#17becf", "unused": "#c7c7c7", "seed": "#d62728"}


def save(fig: Figure, name: str) -> Figure:
    """Write ``fig`` as ``name``.png into ``$BIG_SMALL_FIGURES`` when that variable is set; return it."""
    folder = os.environ.get("BIG_SMALL_FIGURES")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        fig.savefig(Path(folder) / f"{name}.png", dpi=120, bbox_inches="tight")
    return fig


def show_token(tokenizer, token_id: int) -> str:
    """A token as readable text: visible spaces and newlines."""
    text = tokenizer.decode([token_id])
    return re.sub(r"\n", "⏎", text).replace(" ", "␣") or f"<{token_id}>"


def next_token_bars(tokenizer, p_expert: torch.Tensor, p_amateur: torch.Tensor, *, k: int = 12,
                    title: str = "") -> Figure:
    """Notebook 00: the two models' next-token probabilities for the expert's top-k tokens, side by side."""
    top = torch.topk(p_expert, k).indices.tolist()
    labels = [show_token(tokenizer, t) for t in top]
    fig, ax = plt.subplots(figsize=(10, 3.8))
    x = torch.arange(k)
    ax.bar(x - 0.2, [float(p_expert[t]) for t in top], 0.4, label="expert", color=COLORS["expert"])
    ax.bar(x + 0.2, [float(p_amateur[t]) for t in top], 0.4, label="amateur", color=COLORS["amateur"])
    ax.set_xticks(x.tolist(), labels, rotation=45, ha="right")
    ax.set_ylabel("probability")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    return fig


def contrastive_step(tokenizer, step: ContrastiveStep, *, alpha: float, title: str = "") -> Figure:
    """Notebook 02: one contrastive decoding decision -- p_exp, p_ama, the score and the α-mask."""
    cands = step.candidates
    labels = [show_token(tokenizer, c.token_id) for c in cands]
    x = list(range(len(cands)))
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 5.5), sharex=True)
    top.bar([i - 0.2 for i in x], [c.p_exp for c in cands], 0.4, label="p_exp (expert)", color=COLORS["expert"])
    top.bar([i + 0.2 for i in x], [c.p_ama for c in cands], 0.4, label="p_ama (amateur, at τ)",
            color=COLORS["amateur"])
    top.axhline(alpha * cands[0].p_exp, color="k", ls="--", lw=1, label=f"α_CD · max p_exp (α_CD = {alpha})")
    top.set_ylabel("probability")
    top.legend(fontsize=8)
    colors = [COLORS["accepted"] if c.token_id == step.chosen else
              (COLORS["expert"] if c.in_head else COLORS["unused"]) for c in cands]
    bottom.bar(x, [c.score for c in cands], color=colors)
    bottom.axhline(0, color="k", lw=0.5)
    bottom.set_ylabel("log p_exp − log p_ama")
    bottom.set_xticks(x, labels, rotation=45, ha="right")
    bottom.legend(handles=[Patch(color=COLORS["accepted"], label="chosen"),
                           Patch(color=COLORS["expert"], label="in V_head"),
                           Patch(color=COLORS["unused"], label="masked (implausible)")], fontsize=8)
    top.set_title(title)
    fig.tight_layout()
    return fig


def speculative_iterations(tokenizer, iterations: Sequence[SpecIteration], *, title: str = "") -> Figure:
    """Notebook 03: one row per iteration -- draft tokens accepted (green) or rejected (red, and the drafts after
    it unused, grey), then the expert's own token: resampled (purple) or bonus (teal)."""
    fig, ax = plt.subplots(figsize=(11, 0.55 * len(iterations) + 1.2))
    for row, it in enumerate(iterations):
        cells = []
        for i, token in enumerate(it.draft):
            kind = ("accepted" if i < it.n_accepted else "rejected" if i == it.n_accepted else "unused")
            cells.append((show_token(tokenizer, token), kind))
        if it.last_token is not None:
            cells.append((show_token(tokenizer, it.last_token), it.last_kind))
        x = 0.0
        for text, kind in cells:
            width = max(1.0, 0.13 * len(text) + 0.5)
            ax.add_patch(plt.Rectangle((x, -row - 0.4), width - 0.1, 0.8, color=COLORS[kind], alpha=0.85))
            ax.text(x + (width - 0.1) / 2, -row, text, ha="center", va="center", fontsize=8,
                    color="white" if kind != "unused" else "black")
            x += width
        ax.text(-0.3, -row, f"#{row + 1}", ha="right", va="center", fontsize=8)
    ax.set_xlim(-1.2, max(8.0, ax.get_xlim()[1]))
    ax.autoscale_view()
    ax.set_ylim(-len(iterations) + 0.4, 0.6)
    ax.axis("off")
    ax.legend(handles=[Patch(color=COLORS[k], label=k) for k in ("accepted", "rejected", "unused", "resampled",
                                                                 "bonus")],
              loc="upper center", bbox_to_anchor=(0.5, 0), ncol=5, fontsize=8, frameon=False)
    ax.set_title(title)
    fig.tight_layout()
    return fig


def contrastive_round(tokenizer, rows: Sequence[dict], *, title: str = "") -> Figure:
    """Notebook 08: one round of speculative contrastive decoding. Per drafted position, the drafted token's
    probability under the expert (p), the amateur that drew it (q) and the contrastive target (p_cd); the bar
    label says whether the expert accepted it (with probability min(1, p_cd / q)), rejected it or never judged it."""
    fig, ax = plt.subplots(figsize=(2.2 * len(rows) + 2.5, 3.4))
    width = 0.26
    for k, (key, color) in enumerate((("p", "#4c72b0"), ("q", "#dd8452"), ("p_cd", "#55a868"))):
        ax.bar([i + (k - 1) * width for i in range(len(rows))], [row[key] for row in rows], width, color=color,
               label={"p": "p (expert)", "q": "q (amateur, drew it)", "p_cd": "p_cd (target)"}[key])
    ax.set_xticks(range(len(rows)), [f"{i + 1} · {show_token(tokenizer, row['token'])}\n{row['kind']}"
                                     for i, row in enumerate(rows)], fontsize=8)
    for i, row in enumerate(rows):
        if row["kind"] != "unused":
            ax.text(i, max(row["p"], row["q"], row["p_cd"]) + 0.03, f"keep {min(1.0, row['p_cd'] / row['q']):.2f}",
                    ha="center", fontsize=8)
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("probability of the drafted token")
    ax.legend(fontsize=8, loc="upper right")
    ax.set_title(title)
    fig.tight_layout()
    return fig


def distribution_check(exact: torch.Tensor, samples: dict[str, torch.Tensor], labels: Sequence[str], *,
                       title: str = "") -> Figure:
    """Notebook 03: the exact distribution as bars, each sampler's empirical frequencies as markers."""
    fig, ax = plt.subplots(figsize=(11, 3.8))
    x = list(range(len(exact)))
    ax.bar(x, exact.tolist(), color=COLORS["unused"], label="exact (expert)")
    markers = iter(["o", "x", "s", "^"])
    for (name, freq), color in zip(samples.items(), (COLORS["accepted"], COLORS["seed"], "k", "b"), strict=False):
        ax.plot(x, freq.tolist(), next(markers), color=color, label=name, ms=6)
    ax.set_xticks(x, labels, rotation=90, fontsize=7)
    ax.set_ylabel("probability")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    return fig


def sweep(xs: Sequence[float], panels: dict[str, Sequence[float]], *, xlabel: str, title: str = "",
          log_x: bool = False) -> Figure:
    """One small panel per metric over a parameter sweep (notebook 02's α and τ sweeps)."""
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.2), squeeze=False)
    for ax, (name, ys) in zip(axes[0], panels.items(), strict=True):
        ax.plot(list(xs), list(ys), "o-", color=COLORS["expert"])
        ax.set_xlabel(xlabel)
        ax.set_ylabel(name)
        if log_x:
            ax.set_xscale("log")
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def kv_cache_states(gamma: int = 4, accepted: int = 1, prompt_len: int = 3) -> Figure:
    """Notebook 03: what each KV cache holds after one speculative round, (left) when draft ``accepted + 1`` is
    rejected and (right) when all γ drafts are accepted, as :class:`helpers.decoding.CachedModel` does it.

    The amateur fed x_1..x_{γ-1} while drafting (x_γ was sampled, never fed); the expert fed x_1..x_γ in its one
    verification pass. A rejection crops both caches back to the accepted prefix; the expert's own token (resampled
    or bonus) is in neither cache yet, and after a full acceptance the amateur also lacks x_γ: it catches up by
    feeding two tokens before its next draft.
    """
    if not 0 <= accepted < gamma:
        raise ValueError(f"accepted must be in 0..gamma-1 (a rejected draft needs one to reject), got {accepted}")
    styles = {"cached": ("#9ecae1", None), "kept": (COLORS["accepted"], None), "cropped": ("white", "//"),
              "next": ("white", None), "never": (COLORS["unused"], None)}
    labels = [f"t{i + 1}" for i in range(prompt_len)] + [f"x{i + 1}" for i in range(gamma)]

    def row(kind: str, scenario: str) -> list[str]:
        fed = gamma if kind == "expert" else gamma - 1  # drafts whose keys and values were computed
        keep = accepted if scenario == "rejected" else gamma
        states = ["cached"] * prompt_len
        for i in range(1, gamma + 1):
            if i <= min(keep, fed):
                states.append("kept")
            elif i <= fed:
                states.append("cropped")
            else:  # x_γ of the amateur: sampled, never fed; discarded after a rejection, fed after acceptance
                states.append("next" if scenario == "accepted" else "never")
        return [*states, "next"]

    fig, axes = plt.subplots(1, 2, figsize=(12, 2.8), sharey=True)
    for ax, scenario in zip(axes, ("rejected", "accepted"), strict=True):
        last = "y" if scenario == "rejected" else "b"
        for y, kind in enumerate(("expert", "amateur")):
            for x, (state, label) in enumerate(zip(row(kind, scenario), [*labels, last], strict=True)):
                face, hatch = styles[state]
                ax.add_patch(plt.Rectangle((x, 1 - y), 0.9, 0.8, facecolor=face, hatch=hatch, linewidth=1.2,
                                           edgecolor="black", linestyle="--" if state == "next" else "-"))
                ax.text(x + 0.45, 1.4 - y, label, ha="center", va="center", fontsize=9)
        ax.set_xlim(-0.2, len(labels) + 1.1)
        ax.set_ylim(-0.2, 2.0)
        ax.set_yticks([1.4, 0.4], ["expert", "amateur"])
        ax.set_xticks([])
        ax.set_title(f"draft x{accepted + 1} rejected, y resampled" if scenario == "rejected"
                     else "all γ drafts accepted, bonus b", fontsize=10)
    handles = [Patch(facecolor=styles["cached"][0], edgecolor="black", label="prompt (cached)"),
               Patch(facecolor=styles["kept"][0], edgecolor="black", label="accepted draft (cached)"),
               Patch(facecolor="white", hatch="//", edgecolor="black", label="computed, then cropped"),
               Patch(facecolor=COLORS["unused"], edgecolor="black", label="drafted, never fed, discarded"),
               Patch(facecolor="white", edgecolor="black", linestyle="--", label="not in the cache: fed next round")]
    fig.legend(handles=handles, loc="lower center", ncol=5, fontsize=8, frameon=False)
    fig.suptitle(f"the KV caches after one round, γ = {gamma}")
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig


def describe_iteration(tokenizer, it: SpecIteration) -> str:
    """One speculative iteration in words: what was drafted, accepted, rejected and added by the expert."""
    shown = [repr(tokenizer.decode([t])) for t in it.draft]
    parts = [f"drafted {len(it.draft)}: {' '.join(shown) or '(nothing)'}", f"accepted {it.n_accepted}"]
    if it.n_accepted < len(it.draft):
        i = it.n_accepted
        parts.append(f"rejected {shown[i]} (p = {it.p_draft[i]:.2g} < q = {it.q_draft[i]:.2g}, "
                     f"kept with probability {it.p_draft[i] / it.q_draft[i]:.2f})")
    if it.last_token is not None:
        parts.append(f"{it.last_kind} {tokenizer.decode([it.last_token])!r}")
    return "; ".join(parts)


def speculative_stepper(tokenizer, iterations: Sequence[SpecIteration], *, interactive: bool | None = None):
    """Notebook 03's workshop stepper: a button that adds one speculative iteration per click to the picture.

    Headless (``$BIG_SMALL_HEADLESS`` set, as ``make test`` and ``make tutorial`` do, or ``interactive=False``)
    it draws the same steps as one static picture and prints them, so papermill and nbval see plain output.
    """
    if interactive is None:
        interactive = not os.environ.get("BIG_SMALL_HEADLESS")
    if not interactive:
        speculative_iterations(tokenizer, iterations, title=f"the {len(iterations)} iterations of the stepper")
        plt.show()
        for n, it in enumerate(iterations, 1):
            print(f"#{n}: {describe_iteration(tokenizer, it)}")
        return None
    import ipywidgets as widgets
    from IPython.display import clear_output, display

    out, button, shown = widgets.Output(), widgets.Button(description="next iteration ▶"), [0]

    def step(_: object = None) -> None:
        shown[0] = min(shown[0] + 1, len(iterations))
        with out:
            clear_output(wait=True)
            fig = speculative_iterations(tokenizer, iterations[:shown[0]],
                                         title=f"iteration {shown[0]} of {len(iterations)}")
            display(fig)
            plt.close(fig)
            print(describe_iteration(tokenizer, iterations[shown[0] - 1]))
        button.disabled = shown[0] == len(iterations)

    button.on_click(step)
    step()
    return widgets.VBox([button, out])


def quality_bars(table: dict[str, dict[str, tuple[float, float, float]]], metrics: Sequence[str], *,
                 title: str = "") -> Figure:
    """Notebook 04: each method's mean of a few metrics with its 95 % bootstrap interval (``(mean, low, high)``,
    :func:`helpers.compare.mean_interval`), one panel per metric."""
    fig, axes = plt.subplots(1, len(metrics), figsize=(3.3 * len(metrics), 3.4), squeeze=False)
    methods = list(table)
    for ax, metric in zip(axes[0], metrics, strict=True):
        means = [table[m][metric][0] for m in methods]
        below = [table[m][metric][0] - table[m][metric][1] for m in methods]
        above = [table[m][metric][2] - table[m][metric][0] for m in methods]
        ax.bar(range(len(methods)), means, yerr=[below, above], capsize=3,
               color=[COLORS["amateur"] if m.startswith("contrastive") else COLORS["expert"] for m in methods])
        ax.set_xticks(range(len(methods)), methods, rotation=35, ha="right", fontsize=8)
        ax.set_title(metric, fontsize=10)
        if metric == "perplexity":
            ax.set_yscale("log")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def forward_cost(costs: dict[int, float], *, title: str = "") -> Figure:
    """Notebook 04: the cost of one forward pass over n tokens in 1-token steps, against the two idealisations
    (free: 1, as on a large accelerator; proportional: n, as if each token were a separate step)."""
    ns = sorted(costs)
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.plot(ns, [costs[n] for n in ns], "o-", color=COLORS["expert"], label="measured")
    ax.plot(ns, [1.0] * len(ns), "--", color="grey", label="free (r = 1)")
    ax.plot(ns, ns, ":", color=COLORS["rejected"], label="n separate steps")
    ax.set_ylim(0, max(4.0, 1.3 * max(costs.values())))
    ax.set_xlabel("tokens in one forward pass (a verification pass: γ + 1)")
    ax.set_ylabel("cost in 1-token steps")
    ax.legend()
    ax.set_title(title)
    fig.tight_layout()
    return fig


def forward_cost_by_context(by_context: dict[int, dict[int, tuple[float, float, float]]], *, title: str = "") -> Figure:
    """Notebook 04: the cost of a pass over n tokens in 1-token steps at several context lengths (the prompt, +32,
    +64 tokens), each the median over prompts with its smallest and largest prompt shaded
    (:func:`helpers.speed.forward_cost_by_context`)."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for (extra, costs), color in zip(sorted(by_context.items()), plt.cm.viridis([0.1, 0.5, 0.85]), strict=False):
        ns = sorted(costs)
        ax.plot(ns, [costs[n][0] for n in ns], "o-", ms=3, color=color, label=f"prompt + {extra} tokens")
        ax.fill_between(ns, [costs[n][1] for n in ns], [costs[n][2] for n in ns], color=color, alpha=0.15)
    ns = sorted(next(iter(by_context.values())))
    ax.plot(ns, [1.0] * len(ns), "--", color="grey", label="free (r = 1)")
    ax.set_ylim(0, 4.0)
    ax.set_xlabel("tokens in one forward pass (a verification pass: γ + 1)")
    ax.set_ylabel("cost in 1-token steps")
    ax.legend(fontsize=8)
    ax.set_title(title)
    fig.tight_layout()
    return fig


def roofline(paths: dict[str, dict], *, title: str = "") -> Figure:
    """Notebook 04: per execution path (:func:`helpers.kernels.roofline`), left the measured 1-token step beside its
    bandwidth limit (the weights' bytes / the read bandwidth), right the cost of a pass over n tokens in
    1-token steps of the same path."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8), gridspec_kw={"width_ratios": [1, 1.3]})
    names = list(paths)
    colors = plt.cm.viridis([0.05 + 0.85 * i / max(1, len(names) - 1) for i in range(len(names))])
    xs = range(len(names))
    left.bar([x - 0.2 for x in xs], [1e3 * paths[n]["step_seconds"] for n in names], width=0.4, color=colors,
             label="measured step")
    left.bar([x + 0.2 for x in xs], [1e3 * paths[n]["limit_seconds"] for n in names], width=0.4, color=colors,
             alpha=0.35, hatch="//", label="bandwidth limit")
    left.set_xticks(list(xs), [n.replace(" ", "\n") for n in names], fontsize=8)
    left.set_ylabel("ms per 1-token step")
    left.legend(fontsize=8)
    for name, color in zip(names, colors, strict=True):
        r = {int(n): v for n, v in paths[name]["r"].items()}
        ns = sorted(r)
        right.plot(ns, [r[n] for n in ns], "o-", ms=3, color=color, label=name)
    right.axhline(1.0, ls="--", color="grey", lw=1)
    right.set_ylim(0, max(2.5, max(max(p["r"].values()) for p in paths.values()) * 1.05))
    right.set_xlabel("tokens in one forward pass (a verification pass: γ + 1)")
    right.set_ylabel("cost in 1-token steps of the same path")
    right.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def speed_by_gamma(result: dict, *, title: str = "") -> Figure:
    """Notebook 04: the source article's bar chart done fairly -- per-token time of speculative decoding for each
    γ, against naive decoding with a KV cache (our baseline) and without one (the article's baseline)."""
    configs = {c["name"]: c for c in result["configurations"]}
    spec = sorted((c for c in result["configurations"] if c["method"] == "speculative"), key=lambda c: c["gamma"])
    fig, ax = plt.subplots(figsize=(8, 4))
    gammas = [c["gamma"] for c in spec]
    ax.bar(gammas, [1000 * c["per_token_s"]["median"] for c in spec], width=0.6, color=COLORS["accepted"],
           label="speculative (ours)")
    for name, color, label in (("naive", COLORS["expert"], "naive, KV cache (fair baseline)"),
                               ("naive_nocache", COLORS["rejected"], "naive, no cache (the article's baseline)")):
        if name in configs:
            ax.axhline(1000 * configs[name]["per_token_s"]["median"], color=color, ls="--", label=label)
    ax.set_xlabel("γ (draft tokens per iteration)")
    ax.set_ylabel("ms per token (median)")
    ax.set_xticks(gammas)
    ax.legend(fontsize=8)
    ax.set_title(title)
    fig.tight_layout()
    return fig


def speedup_surface(cs: Sequence[float], *, r: float | dict[int, float] = 1.0,
                    points: Sequence[tuple[float, int, float, str]] = (), title: str = "",
                    alpha_label: str = "α (acceptance rate)") -> Figure:
    """Notebooks 04 and 06: the cost model's speedup E[tokens] / (γc + r(γ)) over α × γ, one panel per draft cost c.

    Panels are ordered by c and share one colour scale; each γ is one row of cells (γ is a whole number); the white
    contour at 1 separates "faster" (to its right: higher α) from "slower". ``r`` is one verification cost for every
    γ, or the measured r(γ) per γ (then the γ axis shows exactly the measured γ). ``points`` = (α, γ, c, label) are
    drawn, labelled, in the panel with the nearest c; ``alpha_label`` names the α on the x axis (e.g. the greedy
    agreement).
    """
    from matplotlib.colors import Normalize

    from helpers.timing import predicted_speedup

    r_of = r if isinstance(r, dict) else dict.fromkeys(range(1, 11), float(r))
    gammas = sorted(r_of)
    cs = sorted(cs)
    alphas = torch.linspace(0.01, 0.99, 99)
    grids = [torch.tensor([[predicted_speedup(float(a), g, c, r_of[g]) for a in alphas] for g in gammas])
             for c in cs]
    norm = Normalize(vmin=min(float(g.min()) for g in grids), vmax=max(float(g.max()) for g in grids))
    r_text = (f"r = {r:.2f}" if not isinstance(r, dict)
              else f"r(γ) measured: {min(r.values()):.2f}–{max(r.values()):.2f}")
    fig, axes = plt.subplots(1, len(cs), figsize=(4.0 * len(cs) + 1.2, 3.6), squeeze=False, sharey=True)
    for ax, c, grid in zip(axes[0], cs, grids, strict=True):
        ax.pcolormesh(alphas, gammas, grid, shading="nearest", cmap="viridis", norm=norm)
        ax.contour(alphas, gammas, grid, levels=[1.0], colors="white", linewidths=1.5)
        ax.set_title(f"c = {c:g}, {r_text}", fontsize=10)
        ax.set_xlabel(alpha_label)
        for alpha, gamma, pc, label in points:
            if min(cs, key=lambda x: abs(x - pc)) == c:
                ax.plot(alpha, gamma, "o", color=COLORS["rejected"], ms=8, markeredgecolor="white")
                ax.annotate(label, (alpha, gamma), color="white", xytext=(-6, 6), textcoords="offset points",
                            ha="right" if alpha > 0.5 else "left", fontsize=9)
    axes[0][0].set_ylabel("γ")
    fig.colorbar(plt.cm.ScalarMappable(norm=norm, cmap="viridis"), ax=axes[0].tolist(), label="E[tokens] / (γc + r(γ))")
    fig.suptitle(title)
    return fig


def _box(ax, x: float, y: float, w: float, h: float, text: str, color: str, *, fontsize: int = 9) -> None:
    ax.add_patch(plt.Rectangle((x, y), w, h, facecolor=color, edgecolor="black", alpha=0.9))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fontsize)


def _arrow(ax, start: tuple[float, float], end: tuple[float, float], text: str = "", **style) -> None:
    ax.annotate("", xy=end, xytext=start, arrowprops={"arrowstyle": "->", "lw": 1.3, **style})
    if text:
        ax.text((start[0] + end[0]) / 2 + 0.08, (start[1] + end[1]) / 2, text, fontsize=8, va="center")


def head_architecture(*, hidden: int, layers: int, vocab: int, draft_vocab: int) -> Figure:
    """Notebook 07: the expert (left) and the EAGLE-style draft head (right). The expert's feature f_t, the last
    hidden state after the final norm, goes into the head with the embedding of the token x_{t+1}; the head's one
    decoder layer predicts f̂_{t+1}, read out through the expert's own LM head rows of V_draft; from the second
    draft step on the head reads its own f̂ (dashed)."""
    blue, orange, grey = "#c6dbef", "#fdd0a2", "#e5e5e5"
    fig, ax = plt.subplots(figsize=(11, 5.2))
    _box(ax, 0.2, 0.3, 2.6, 0.6, r"tokens $x_0 \ldots x_t$", grey)
    _box(ax, 0.2, 1.3, 2.6, 1.6, f"expert: embedding +\n{layers} decoder layers\n+ final norm\n(hidden {hidden})", blue)
    _box(ax, 0.2, 3.3, 2.6, 0.6, r"feature $f_t$", blue)
    _box(ax, 0.2, 4.3, 2.6, 0.6, f"LM head ({vocab:,} rows)\n→ $p(x_{{t+1}})$", blue, fontsize=8)
    _arrow(ax, (1.5, 0.9), (1.5, 1.3))
    _arrow(ax, (1.5, 2.9), (1.5, 3.3))
    _arrow(ax, (1.5, 3.9), (1.5, 4.3))
    _box(ax, 4.0, 0.3, 2.4, 0.6, "embedding $e(x_{t+1})$\n(the expert's, frozen)", grey, fontsize=8)
    _box(ax, 4.0, 1.3, 4.6, 0.6, f"fc: $[e(x_{{t+1}}); f_t]$  ({2 * hidden} → {hidden})", orange)
    _box(ax, 4.0, 2.3, 4.6, 0.9, "one decoder layer, the expert's shape\n(attention over the head's own KV cache"
         " + MLP)", orange, fontsize=8)
    _box(ax, 4.0, 3.6, 2.4, 0.6, r"predicted $\hat f_{t+1}$", orange)
    _box(ax, 4.0, 4.5, 4.6, 0.6,
         f"the expert's LM head, only the rows of $V_\\mathrm{{draft}}$ ({draft_vocab:,})\n→ $q(x_{{t+2}})$",
         blue, fontsize=8)
    _arrow(ax, (5.2, 0.9), (5.2, 1.3))
    _arrow(ax, (2.8, 3.6), (4.6, 1.9), "$f_t$")
    _arrow(ax, (6.3, 1.9), (6.3, 2.3))
    _arrow(ax, (5.2, 3.2), (5.2, 3.6))
    _arrow(ax, (5.2, 4.2), (5.2, 4.5))
    _arrow(ax, (6.4, 3.9), (8.4, 1.9), linestyle="--", color="#d62728")
    ax.text(7.6, 3.6, "draft steps 2..γ:\n" + r"$\hat f$ in place of $f$", fontsize=8, color="#d62728")
    ax.text(4.0, 5.45, "draft head (trained)", fontsize=11, color="#e6550d", weight="bold")
    ax.text(0.2, 5.45, "expert (frozen)", fontsize=11, color="#08519c", weight="bold")
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 5.8)
    ax.axis("off")
    fig.tight_layout()
    return fig


def draft_tree(tokenizer, tree: DraftTree, accepted: Sequence[int] = (), *, title: str = "") -> Figure:
    """Notebook 07: a draft tree (left; :class:`helpers.trees.DraftTree`, nodes labelled with their token and path
    probability, the ``accepted`` nodes in green) and the attention mask of its verification pass (right: which
    position each row may attend to, besides the prefix that every row sees)."""
    n = len(tree)
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.6), gridspec_kw={"width_ratios": [1.35, 1]})
    leaves_below: dict[int, list[int]] = {i: [] for i in range(-1, n)}
    for i, parent in enumerate(tree.parents):
        leaves_below[parent].append(i)
    y_of: dict[int, float] = {}
    counter = [0.0]

    def place(node: int) -> float:
        children = leaves_below[node]
        if not children:
            y_of[node] = counter[0]
            counter[0] += 1
        else:
            y_of[node] = sum(place(child) for child in children) / len(children)
        return y_of[node]

    place(-1)
    x_of = {-1: 0, **{i: d for i, d in enumerate(tree.depths)}}
    for i, parent in enumerate(tree.parents):
        left.plot([x_of[parent], x_of[i]], [y_of[parent], y_of[i]], color="grey", lw=1, zorder=1)
    for node in [-1, *range(n)]:
        label = "root" if node < 0 else f"{show_token(tokenizer, tree.tokens[node])}\n{tree.scores[node]:.2f}"
        color = "#a1d99b" if node in accepted else ("#c6dbef" if node < 0 else "white")
        left.text(x_of[node], y_of[node], label, ha="center", va="center", fontsize=8, zorder=2,
                  bbox={"boxstyle": "round", "facecolor": color, "edgecolor": "black"})
    left.set_xlim(-0.5, max(tree.depths) + 0.5)
    left.set_ylim(-0.8, counter[0] - 0.2)
    left.set_xticks(range(max(tree.depths) + 1), ["root", *[f"depth {d}" for d in range(1, max(tree.depths) + 1)]])
    left.set_yticks([])
    left.invert_yaxis()
    left.set_title(title or f"a draft tree of {n} nodes (token, path probability)", fontsize=10)
    mask = torch.ones(n + 1, n + 1, dtype=torch.bool).tril()
    mask[1:, 1:] = tree_attention(tree.parents)
    mask[1:, 0] = True
    names = ["root", *[f"{i}:{show_token(tokenizer, t)}" for i, t in enumerate(tree.tokens)]]
    right.imshow(mask.float(), cmap="Blues", vmin=0, vmax=1.4)
    right.set_xticks(range(n + 1), names, rotation=90, fontsize=7)
    right.set_yticks(range(n + 1), names, fontsize=7)
    right.set_xlabel("key (may be attended to)")
    right.set_ylabel("query")
    right.set_title("tree attention mask: a node sees the root, its ancestors and itself", fontsize=10)
    fig.tight_layout()
    return fig
