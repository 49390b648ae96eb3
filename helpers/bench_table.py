"""The speed benchmark's result (:func:`helpers.bench.run_benchmark`, or a committed ``bench-*.json``) as a
Markdown table with a few lines of context: c, r, α at temperature 1, ours against transformers, the machine."""

from __future__ import annotations

import math

from helpers.protocol import MIN_PROMPTS


def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "–" if value is None or (isinstance(value, float) and not math.isfinite(value)) else format(value, spec)


def _interval(row: dict, prompts: int) -> str:
    """`` [low, high]``, or nothing below :data:`~helpers.protocol.MIN_PROMPTS` prompts (files written before that
    rule hold intervals from fewer prompts: they are not shown)."""
    interval = row.get("speedup_interval")
    return f" [{interval[0]:.2f}, {interval[1]:.2f}]" if interval and prompts >= MIN_PROMPTS else ""


def markdown_table(result: dict) -> str:
    """The result as a Markdown table plus a few lines with c, r, α at T=1 and the ours/HF ratios. Results with
    every drafter's c (``cost.c_by_drafter``) get the columns c, r and "from counts"
    (:func:`helpers.timing.speedup_from_counts`)."""
    per_drafter = "c_by_drafter" in result["cost"]
    prompts = len(result["settings"]["prompts"])
    extra_head, extra_rule = (" c | r | from counts |", "---:|---:|---:|") if per_drafter else ("", "")
    ci = " [95 % CI]" if prompts >= MIN_PROMPTS else f" (no interval from {prompts} prompts)"
    lines = [f"| configuration | γ | ms/token median | min–max | speedup vs naive{ci} | explained | α | "
             f"drafts kept | tokens/expert call |{extra_head} same text |",
             f"|---|---:|---:|---:|---:|---:|---:|---:|---:|{extra_rule}---:|"]
    for row in result["configurations"]:
        t = row["per_token_s"]
        extra = ""
        if per_drafter:
            counts = row.get("explained_from_counts")
            extra = (f" {_fmt(row.get('c'), '.3f')} | {_fmt(row.get('r'))} | "
                     f"{_fmt(counts)}{'×' if counts is not None else ''} |")
        lines.append(
            f"| {row['label']} | {row['gamma'] or ''} | {t['median'] * 1e3:.1f} | "
            f"{t['min'] * 1e3:.1f}–{t['max'] * 1e3:.1f} | {_fmt(row['speedup_vs_naive'])}×{_interval(row, prompts)} | "
            f"{_fmt(row.get('predicted_speedup'))}{'×' if 'predicted_speedup' in row else ''} | "
            f"{_fmt(row.get('alpha'))} | {_fmt(row.get('share_kept', row.get('acceptance_rate')))} | "
            f"{_fmt(row.get('tokens_per_expert_call'))} |{extra} "
            f"{row['same_text_as_naive']:.0%} |")
    cost, settings, ratios = result["cost"], result["settings"], result["ratios"]
    r = ", ".join(f"r({g})={_fmt(v)}" for g, v in cost["r"].items())
    spec_hf = ", ".join(f"γ={g}: {_fmt(v)}" for g, v in ratios["ours_speculative_over_hf_assisted"].items()) or "–"
    t1 = result["alpha_t1"]
    machine = result["machine"]
    lines += [
        "",
        f"- cost ratios of the pair's amateur ({settings['amateur']}): c={_fmt(cost['c'], '.3f')}, {r}; "
        f"explained = E[tokens]/(γ·c + r(γ)) with α = {result['alpha_source']} (the same run's α: an "
        "explanation of the measurement, not a prediction from held-out data)",
        *(["- every drafter's c: " + ", ".join(f"{k} {_fmt(v, '.3f')}" for k, v in cost["c_by_drafter"].items())
           + "; from counts = N / Σ (d·c + r(d)) over its speculative rounds, N the tokens generated, d each round's "
             "counted draft length, r(0) = 1"]
          if per_drafter else []),
        f"- α of the pair's amateur at temperature 1 (one sampled speculative run per prompt, γ={t1['gamma']}): "
        f"{_fmt(t1['alpha'], '.3f')}",
        f"- time ours/HF (median over prompts and timing rounds of paired ratios, no interval): naive/greedy "
        f"{_fmt(ratios['ours_naive_over_hf_greedy'])}; speculative/assisted {spec_hf} (< 1: ours took less time in "
        "the median pair; the table's per-token medians can order the two otherwise)",
        f"- {settings['pair']} ({settings['expert']} + {settings['amateur']}), {settings['max_new_tokens']} "
        f"tokens, {len(settings['prompts'])} prompts × {settings['repeats']} timing rounds, temperature "
        f"{settings['temperature']:g}; {machine['device']}, threads={machine['threads']}, CPU: {machine['cpu']}",
    ]
    loads = machine.get("load_average_before"), machine.get("load_average_after")
    if all(loads):
        busy = max(loads[0][0], loads[1][0]) > machine["threads"] + 1  # the benchmark's own threads count too
        lines.append(f"- load average (1 min) before/after: {loads[0][0]:.2f}/{loads[1][0]:.2f} on "
                     f"{machine['cpu_count']} cores" + (": other processes shared the CPU, the timings are not clean"
                                                        if busy else ""))
    return "\n".join(lines)


BASELINE = "ours: naive, KV cache"
"""The configuration every speedup of a ``bench-*.json`` file is relative to."""


def readme_cells(result: dict) -> str:
    """The README's result and command cells of an older-protocol file, rendered from it: what was timed, every
    configuration's speedup over naive decoding with a KV cache (grouped by configuration, by γ; intervals only from
    :data:`~helpers.protocol.MIN_PROMPTS` prompts), whether every configuration wrote naive decoding's text, the
    drafters' c and r(γ) for the γ timed; then the command. ``tests/test_bench_table.py`` finds them in the README,
    verbatim, after a typed description of the row and its machine."""
    settings, cost, rows = result["settings"], result["cost"], result["configurations"]
    prompts, rounds = len(settings["prompts"]), settings["repeats"]
    grouped: dict[str, list[str]] = {}
    for row in rows:
        if row["label"] != BASELINE and row["speedup_vs_naive"] is not None:
            gamma = f"γ = {row['gamma']} " if row["gamma"] else ""
            grouped.setdefault(row["label"].removeprefix("ours: "), []).append(
                f"{gamma}{row['speedup_vs_naive']:.2f}×{_interval(row, prompts)}")
    speedups = "; ".join(f"{label}: {', '.join(values)}" for label, values in grouped.items())
    interval = "[95 % CI]" if prompts >= MIN_PROMPTS else f"(point estimates: no interval from {prompts} prompts)"
    same = sum(row["same_text_as_naive"] == 1 for row in rows)
    same_text = ("every configuration wrote naive decoding's text" if same == len(rows)
                 else f"{same} of {len(rows)} configurations wrote naive decoding's text on every prompt")
    c = ("c: " + ", ".join(f"{name.replace('_', ' ')} {value:.3g}" for name, value in cost["c_by_drafter"].items())
         if "c_by_drafter" in cost else f"c of the pair's amateur {cost['c']:.3g}")
    r = ", ".join(f"r({g}) = {value:.2f}" for g, value in cost["r"].items())
    command = result["command"].replace(" --no-progress", "")
    return (f"| {prompts} prompts × {rounds} timing round{'s' * (rounds != 1)}, {settings['max_new_tokens']} tokens, "
            f"T = {settings['temperature']:g}, one run; speedup over naive decoding {interval}: {speedups}; "
            f"{same_text}; {c}; {r} | `{command}` |")
