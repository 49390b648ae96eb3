"""Execution paths of a model on a CPU, and the roofline of one decoding step (notebook 04).

A decoding step multiplies one token's vector with every weight matrix of the model: it reads all the weights
once and does two flops per weight, so its time is bounded below by the *bandwidth limit*

    t_limit = bytes of the weights read per step / read bandwidth of the memory            (roofline, Williams 2009)

and a pass over n tokens reads the same bytes once, so its cost in 1-token steps, (n-token pass) / (1-token step)
(= r(n − 1) in the tutorial's notation: a verification pass over γ + 1 tokens costs r(γ)), should stay near 1
while the pass is memory-bound. How close a CPU gets depends on the *kernels* that do the multiplications, not on
the model. The paths (:data:`KERNELS`), chosen by ``load_pair(..., kernels=...)``:

``"eager"``
    PyTorch's default fp32 linear layers: a matrix-vector kernel for one token, a general matrix-matrix kernel for
    several, which typically copies ("packs") blocks of the weight matrix into a cache-friendly layout at every
    call (Goto & van de Geijn 2008): a likely cause of the jump in the cost of a pass from 2 tokens on.
``"prepacked"``
    The same fp32 weights converted once into oneDNN's blocked layout (``torch.utils.mkldnn.to_mkldnn``): the
    layout is paid for at load time, not at every call. The same expert up to float rounding.
``"int8"``
    Every linear layer in int8 with integer accumulation (:class:`Int8Linear`): a quarter of the bytes.
    **A different expert**: its logits differ from fp32 by more than rounding, so its text can differ.

Speculative decoding is exact relative to the expert *as it runs*, which presumes that the expert computes a
position the same way in a 1-token step and inside a verification pass. In fp32 (eager or prepacked) the two
differ by float rounding only. In int8 (and in bf16) every activation is rounded coarsely, and a rounding
difference of the size fp32 produces can flip one of those coarse roundings and grow layer by layer: :func:`fidelity`
measures how far the two computations of one position drift apart, and how often greedy speculative decoding
still reproduces greedy decoding on the same path. (PyTorch's ``torch.ao.quantization.quantize_dynamic`` is not
offered: it scales the activations of a whole pass at once, so a position's logits depend on the pass length by
design; in one probe on the AMD EPYC with AVX-512 on 6 evaluation prompts, its argmax matched the fp32 expert's
on 51 % of the positions.)

bf16 weights are not a kernel path but a dtype: ``load_pair(..., dtype=torch.bfloat16)`` (fast only where the CPU
has bf16 instructions, :func:`helpers.machine.fast_bf16`). ``torch.compile`` is not offered: on the 2-core AMD
EPYC with AVX-512 it took 218 s to compile the pocket expert for one token and 241 s more for four (one probe).

``python -m helpers.kernels --out data/results/kernels-<cpu>.json`` measures the roofline of every path on the
evaluation prompts (:func:`measure`): read bandwidth, bytes per step, step time and the cost of a pass over
n = 1..16 tokens, interleaved in one shuffled order per round, raw seconds kept; and what each path changes
(:func:`fidelity`). The bf16 path is measured only on a CPU with bf16 instructions; elsewhere a few alternating
steps (:func:`bf16_probe`) record why it is left out.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch.utils.mkldnn import MkldnnLinear
from transformers import DynamicCache, PreTrainedModel

from helpers.decoding import naive, speculative
from helpers.timing import ForwardStep, interleaved

if TYPE_CHECKING:
    from helpers.models import Pair

KERNELS = ("eager", "prepacked", "int8")


class Int8Linear(torch.nn.Module):
    """A linear layer in int8 with integer accumulation (W8A8, the per-token scheme of LLM.int8() without its
    outlier path, Dettmers et al. 2022): the weight is rounded once per output row, w ≈ s_w[j]·W8[j, :]; each
    token's input vector per token, x ≈ s_x[i]·X8[i, :] with s_x = max|x_i| / 127; then

        y[i, j] = s_x[i] · s_w[j] · Σ_k X8[i, k] · W8[j, k]   (+ b[j])        the sum in int32: exact

    so the layer's output for a token does not depend on the other tokens of the pass (the integer sum is exact).
    The model around it (attention, norms, in fp32) still rounds a 1-token step and a longer pass differently,
    and the coarse rounding of the next layer's input can turn that into larger differences (module docstring)."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        weight = linear.weight.detach().float()
        scale = weight.abs().amax(dim=1).clamp(min=1e-12) / 127
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("weight_t", torch.round(weight / scale[:, None]).to(torch.int8).t().contiguous())
        self.register_buffer("scale", scale)
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().float())

    @property
    def weight(self) -> torch.Tensor:
        """The de-quantised weight (out, in), as a plain linear layer would hold it."""
        return self.weight_t.t().float() * self.scale[:, None]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features).float()
        x_scale = rows.abs().amax(dim=1, keepdim=True).clamp_(min=1e-12).div_(127)
        quantised = torch.round(rows / x_scale).to(torch.int8)
        y = torch._int_mm(quantised, self.weight_t) * (x_scale * self.scale)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], self.out_features).to(x.dtype)


def check_kernels(kernels: str, device: torch.device | str) -> None:
    """Refuse an unknown path, and the CPU-only paths on an accelerator (whose own kernels are already fast)."""
    if kernels not in KERNELS:
        raise ValueError(f"unknown kernels {kernels!r}: choose one of {KERNELS}")
    if kernels != "eager" and torch.device(device).type != "cpu":
        raise ValueError(f"kernels={kernels!r} is a CPU path; on {torch.device(device).type} use kernels='eager'")


def with_kernels(model: torch.nn.Module, kernels: str) -> torch.nn.Module:
    """``model`` with its ``torch.nn.Linear`` layers converted to the path ``kernels``, **in place** (modules shared
    with another model are converted for both); returns it. ``"eager"`` leaves it as it is. Other layer types
    (GPT-2's ``Conv1D``, say) stay as they are."""
    device = next(model.parameters()).device
    check_kernels(kernels, device)
    if kernels == "prepacked" and next(model.parameters()).dtype not in (torch.float32, torch.bfloat16):
        raise ValueError("prepacked linear layers need fp32 or bf16 weights")
    convert = {"prepacked": lambda linear: MkldnnLinear(linear, dtype=linear.weight.dtype), "int8": Int8Linear}
    if kernels in convert:
        for parent in list(model.modules()):
            for name, child in list(parent.named_children()):
                if type(child) is torch.nn.Linear:
                    setattr(parent, name, convert[kernels](child))
    return model


def dense_weight(linear: torch.nn.Module) -> torch.Tensor:
    """The weight of a linear layer on any path, as an ordinary dense tensor (int8 weights de-quantised)."""
    weight = linear.weight
    if weight.is_mkldnn:
        weight = weight.to_dense()
    return weight.detach()


CONVERTED_LINEAR = (MkldnnLinear, Int8Linear)
"""The linear layers of the prepacked and int8 paths (their weights are buffers or packed, not parameters)."""


def converted_parameters(linear: torch.nn.Module) -> int:
    """Weights + biases of a converted linear layer (what ``torch.nn.Linear`` would count as its parameters; oneDNN
    stores a missing bias as zeros, counted as none)."""
    bias = linear.bias
    if bias is not None and bias.is_mkldnn:
        bias = bias.to_dense()
    weight = dense_weight(linear)
    return weight.numel() + (0 if bias is None or not bool(bias.any()) else bias.numel())


def step_bytes(model: torch.nn.Module) -> int:
    """Bytes of the weights one decoding step reads: every linear layer's weight in its stored type (int8: one
    byte per weight), plus one row of each embedding table; norms and biases are negligible and left out."""
    total = 0
    for module in model.modules():
        if isinstance(module, torch.nn.Embedding):
            total += module.weight.shape[1] * module.weight.element_size()
        elif isinstance(module, Int8Linear):
            total += module.weight_t.numel()
        elif isinstance(module, torch.nn.Linear | MkldnnLinear):
            total += module.weight.numel() * (2 if module.weight.dtype == torch.bfloat16 else 4)
    return total


BANDWIDTH_BUFFER_BYTES = 512 * 2**20
"""The buffer :func:`read_bandwidth` sums by default: far larger than any CPU cache."""


def read_bandwidth(n_bytes: int = BANDWIDTH_BUFFER_BYTES, repeats: int = 20) -> float:
    """Bytes per second at which this machine reads a fp32 buffer of ``n_bytes`` (far larger than any cache): the
    median over ``repeats`` sums (a read-only stream, what a decoding step does with its weights)."""
    buffer = torch.ones(n_bytes // 4)
    buffer.sum()
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        buffer.sum()
        seconds.append(time.perf_counter() - start)
    return n_bytes / float(np.median(seconds))


def paths(pair: Pair, *, bf16: bool = True) -> dict[str, tuple[PreTrainedModel, PreTrainedModel]]:
    """The pocket pair (expert, distilled draft) on every path of the roofline: ``"fp32 eager"`` (``pair``'s own
    models), ``"fp32 prepacked"``, ``"bf16 eager"`` (only with ``bf16``) and ``"int8"`` (converted copies)."""
    def copies(convert: Callable[[torch.nn.Module], torch.nn.Module]) -> tuple[PreTrainedModel, PreTrainedModel]:
        return convert(copy.deepcopy(pair.expert)), convert(copy.deepcopy(pair.amateur))

    out = {"fp32 eager": (pair.expert, pair.amateur),
           "fp32 prepacked": copies(lambda m: with_kernels(m, "prepacked"))}
    if bf16:
        out["bf16 eager"] = copies(lambda m: m.to(torch.bfloat16))
    return out | {"int8": copies(lambda m: with_kernels(m, "int8"))}


def bf16_probe(expert: PreTrainedModel, ids: torch.Tensor, repeats: int = 5) -> dict[str, float]:
    """Median seconds of a 1-token step of ``expert`` in fp32 and in bf16, alternating, on one prompt: why a CPU
    without bf16 instructions (:func:`helpers.machine.fast_bf16`) leaves the bf16 path out of the roofline."""
    steps = {"fp32": ForwardStep(expert, ids, 1), "bf16": ForwardStep(copy.deepcopy(expert).to(torch.bfloat16), ids, 1)}
    return {f"{name}_step_seconds": float(np.median(s)) for name, s in interleaved(steps, repeats).items()}


def measure(models: dict[str, PreTrainedModel], prompts: Sequence[torch.Tensor], *, max_tokens: int = 16,
            repeats: int = 3, seed: int = 0) -> list[dict]:
    """Per prompt, the raw seconds of a pass over n = 1..``max_tokens`` new tokens on every path: a warm-up round,
    then ``repeats`` rounds, each running every (path, n) once in an order shuffled anew (seeded)."""
    rng = np.random.default_rng(seed)
    lengths = range(1, max_tokens + 1)
    rows = []
    for i, ids in enumerate(prompts):
        steps = {(name, n): ForwardStep(model, ids, n) for name, model in models.items() for n in lengths}
        for step in steps.values():
            step()
        seconds: dict[str, dict[int, list[float]]] = {name: {n: [] for n in lengths} for name in models}
        keys = list(steps)
        for _ in range(repeats):
            for k in rng.permutation(len(keys)):
                name, n = keys[k]
                start = time.perf_counter()
                steps[name, n]()
                seconds[name][n].append(time.perf_counter() - start)
        rows.append({"prompt": i, "context": ids.shape[1], "seconds": seconds})
    return rows


def roofline(rows: Sequence[dict], step_bytes_by_path: dict[str, int], bandwidth: float) -> dict[str, dict]:
    """Per path: the median 1-token step (seconds), its bandwidth limit, step / limit, and ``r``: {n: the cost of a
    pass over n tokens in 1-token steps} (r(n − 1) in the notation box), each prompt's median per-round ratio of an
    n-token pass to the same round's 1-token step, then the median over prompts."""
    out = {}
    for name, n_bytes in step_bytes_by_path.items():
        per_prompt = [row["seconds"][name] for row in rows]
        step = float(np.median([np.median(s[1]) for s in per_prompt]))
        r = {n: float(np.median([np.median(np.asarray(s[n]) / np.asarray(s[1])) for s in per_prompt]))
             for n in per_prompt[0]}
        out[name] = {"bytes": n_bytes, "step_seconds": step, "limit_seconds": n_bytes / bandwidth,
                     "step_over_limit": step * bandwidth / n_bytes, "r": r}
    return out


@torch.no_grad()
def step_vs_pass(model: PreTrainedModel, ids: torch.Tensor, n: int = 5) -> float:
    """max |logits| difference at the last position of ``ids`` between one pass over all of it and a pass over all
    but the last ``n`` tokens followed by ``n`` 1-token steps: how differently the model computes one position."""
    whole = model(ids).logits[0, -1].float()
    cache = DynamicCache(config=model.config)
    model(ids[:, :-n], past_key_values=cache, use_cache=True)
    for i in range(ids.shape[1] - n, ids.shape[1]):
        last = model(ids[:, i:i + 1], past_key_values=cache, use_cache=True).logits[0, -1].float()
    return float((whole - last).abs().max())


@torch.no_grad()
def fidelity(pairs: dict[str, tuple[PreTrainedModel, PreTrainedModel]], prompts: Sequence[torch.Tensor], *,
             max_new_tokens: int, eos_token_id: int | None = None, gamma: int = 4,
             reference: str = "fp32 eager") -> dict[str, dict[str, float]]:
    """What each path changes and what it keeps, on ``prompts``: teacher-forced on the reference's greedy
    continuation, the share of positions where the path's argmax equals the reference's and its perplexity of
    those tokens (mean NLL over all positions, exponentiated); the largest :func:`step_vs_pass` over the texts; and
    on how many prompts greedy speculative decoding (its own draft, ``gamma``) reproduces greedy decoding on the
    same path, token for token."""
    greedy = {"max_new_tokens": max_new_tokens, "temperature": 0.0, "eos_token_id": eos_token_id}
    texts = [torch.cat([ids, torch.tensor([naive(pairs[reference][0], ids, **greedy).new_token_ids])], dim=1)
             for ids in prompts]
    out = {}
    for name, (expert, amateur) in pairs.items():
        same = total = identical = 0
        nll, gap = 0.0, 0.0
        for ids, text in zip(prompts, texts, strict=True):
            logits = expert(text).logits[0, ids.shape[1] - 1:-1].float()
            target = text[0, ids.shape[1]:]
            same += int((logits.argmax(-1) == target).sum())
            total += target.numel()
            nll += float(torch.nn.functional.cross_entropy(logits, target, reduction="sum"))
            gap = max(gap, step_vs_pass(expert, text))
            identical += (naive(expert, ids, **greedy).new_token_ids
                          == speculative(expert, amateur, ids, gamma=gamma, **greedy).new_token_ids)
        out[name] = {"argmax_agreement": same / total, "perplexity": float(np.exp(nll / total)),
                     "step_vs_pass": gap, "greedy_identical": identical, "prompts": len(prompts)}
    return out


def readme_row(result: dict) -> str:
    """The README's row for a result file of ``python -m helpers.kernels`` (a test checks that the README holds it)."""
    s = result["settings"]
    short = {name: [row["r"][str(n)] for n in range(2, 7)] for name, row in result["roofline"].items()}
    paths_text = "; ".join(
        f"{name}: step {1e3 * row['step_seconds']:.1f} ms ({row['step_over_limit']:.1f}× its limit "
        f"{1e3 * row['limit_seconds']:.1f} ms), a pass over 2..6 tokens {min(short[name]):.2f}"
        f"–{max(short[name]):.2f} steps, greedy speculative = greedy on "
        f"{result['fidelity'][name]['greedy_identical']}/{result['fidelity'][name]['prompts']} requests"
        for name, row in result["roofline"].items())
    what = (f"**execution paths of the expert** (notebook 04; {s['prompts']} held-out chat requests, passes over "
            f"1..16 tokens, {s['repeats']} shuffled timing rounds, one run)")
    bandwidth = f"read bandwidth {result['bandwidth_bytes_per_second'] / 1e9:.0f} GB/s; "
    left_out = "".join(f"; {name} left out (no bf16 instructions: one step {1e3 * row['bf16_step_seconds']:.0f} ms, "
                       f"fp32 {1e3 * row['fp32_step_seconds']:.0f} ms)"
                       for name, row in result.get("left_out", {}).items())
    return (f"| {what} | {result['machine']['cpu_kind']} | {bandwidth}{paths_text}{left_out} | "
            f"`{result['command']}` |")


def main(argv: Sequence[str] | None = None) -> None:
    from helpers.data import EVAL_PROMPTS, read_prompts
    from helpers.machine import fast_bf16, machine_info
    from helpers.models import load_pair

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--show", action="store_true", help="print the README row of an existing --out file")
    parser.add_argument("--prompts", type=int, default=10, help="evaluation prompts (chat template) timed")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds per prompt")
    parser.add_argument("--fidelity-tokens", type=int, default=48, help="greedy tokens per prompt, fidelity()")
    args = parser.parse_args(argv)
    if args.show:
        print(readme_row(json.loads(args.out.read_text())))
        return
    started = time.perf_counter()
    pair = load_pair("pocket")
    bf16 = fast_bf16("cpu")
    pairs = paths(pair, bf16=bf16)
    prompts = [pair.encode_chat(p) for p in read_prompts(EVAL_PROMPTS)[: args.prompts]]
    left_out = {} if bf16 else {"bf16 eager": {
        "why": "no bf16 instructions (helpers.machine.fast_bf16): the kernels emulate bf16",
        **bf16_probe(pair.expert, prompts[0])}}
    bandwidth = read_bandwidth()
    rows = measure({name: expert for name, (expert, _) in pairs.items()}, prompts, repeats=args.repeats)
    result = {"command": "python -m helpers.kernels " + " ".join(argv or sys.argv[1:]),
              "machine": machine_info(pair.device),
              "settings": vars(args) | {"out": str(args.out)}, "bandwidth_bytes_per_second": bandwidth,
              "roofline": roofline(rows, {name: step_bytes(e) for name, (e, _) in pairs.items()}, bandwidth),
              "fidelity": fidelity(pairs, prompts, max_new_tokens=args.fidelity_tokens, eos_token_id=pair.eos_token_id),
              "left_out": left_out,
              "raw": rows,
              "seconds": time.perf_counter() - started}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for name, row in result["roofline"].items():
        print(f"{name:15s} step {row['step_seconds'] * 1e3:6.1f} ms = {row['step_over_limit']:.1f}× its limit "
              f"{row['limit_seconds'] * 1e3:5.1f} ms; r(2..6) " + " ".join(f"{row['r'][n]:.2f}" for n in range(2, 7)))
    for name, row in result["fidelity"].items():
        print(f"{name:15s} argmax = fp32's on {row['argmax_agreement']:.3f}, perplexity {row['perplexity']:.2f}, "
              f"step vs pass {row['step_vs_pass']:.1e}, greedy identical on {row['greedy_identical']}/{row['prompts']}")
    for name, row in left_out.items():
        print(f"{name:15s} left out: {row['why']}; one step {1e3 * row['bf16_step_seconds']:.0f} ms in bf16 vs "
              f"{1e3 * row['fp32_step_seconds']:.0f} ms in fp32")


if __name__ == "__main__":
    main()
