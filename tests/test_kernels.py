"""helpers.kernels: the execution paths (same model up to rounding for prepacked, a different but close one for
int8), speculative decoding's guarantees on each path (greedy identity, the exact one-round enumeration), the
bytes a step reads, the roofline's arithmetic, and clear errors."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import assert_readme_rows, random_head

from helpers import kernels
from helpers.data import EVAL_PROMPTS, read_prompts
from helpers.decoding import naive, speculative
from helpers.heads import head_speculative, load_head
from helpers.models import count_parameters, load_pair, tiny_random_model
from helpers.stats import exact_distribution, round_error

PATHS = ("prepacked", "int8")


def converted(model: torch.nn.Module, path: str) -> torch.nn.Module:
    return kernels.with_kernels(copy.deepcopy(model), path)


@pytest.mark.parametrize("path", PATHS)
def test_a_path_keeps_the_model_and_its_weights(path):
    model = tiny_random_model(0, layers=2)
    other = converted(model, path)
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        reference, logits = model(ids).logits, other(ids).logits
    # prepacked: the same fp32 weights, other kernels; int8: weights and inputs rounded to 8 bits (a different model)
    assert torch.allclose(logits, reference, atol=1e-5 if path == "prepacked" else 0.1 * float(reference.abs().max()))
    assert not any(type(m) is torch.nn.Linear for m in other.modules())
    assert count_parameters(other) == count_parameters(model)
    weight = model.lm_head.weight.detach()  # int8: each weight within half a grid step (max |row| / 127)
    step = 0 if path == "prepacked" else float(weight.abs().max()) / 127
    assert torch.allclose(kernels.dense_weight(other.lm_head), weight, atol=step / 2 + 1e-6)


def test_int8_treats_every_token_alone():
    linear = torch.nn.Linear(32, 24).requires_grad_(False)
    layer = kernels.Int8Linear(linear)
    x = torch.randn(5, 32)
    together = layer(x[None])[0]
    alone = torch.cat([layer(x[i:i + 1]) for i in range(5)])
    assert torch.equal(together, alone), "the integer sum makes a token's output independent of the pass"
    assert torch.allclose(layer(x), linear(x), atol=0.05 * float(linear(x).abs().max()))


@pytest.mark.parametrize("path", ("eager", *PATHS))
@pytest.mark.parametrize("gamma", [1, 3])
def test_greedy_speculative_decoding_is_greedy_decoding_on_the_same_path(tiny_pair, path, gamma):
    expert, amateur = (converted(m, path) for m in tiny_pair)
    ids = torch.tensor([[1, 2, 3]])
    assert (speculative(expert, amateur, ids, max_new_tokens=12, gamma=gamma, temperature=0).new_token_ids
            == naive(expert, ids, max_new_tokens=12, temperature=0).new_token_ids)


@pytest.mark.parametrize("path", ("eager", *PATHS))
def test_one_enumerated_round_is_exact_on_every_path(path):
    """Leviathan et al. Appendix A.1 on the path's own expert: one round's output, continued by the expert, has the
    expert's distribution (fp32, so the tolerance is fp32's)."""
    expert = converted(tiny_random_model(2, layers=2, vocab=6), path)
    amateur = converted(tiny_random_model(3, vocab=6), path)
    prompt = torch.tensor([[1, 2, 3]])
    outputs = exact_distribution(lambda: tuple(speculative(expert, amateur, prompt, max_new_tokens=3, gamma=2,
                                                           temperature=1.0).trace[0].emitted), branching_draws=3)
    assert round_error(outputs, expert, prompt, 3, temperature=1.0) < 1e-5


@pytest.mark.parametrize("path", PATHS)
def test_a_draft_head_runs_on_a_converted_expert(tiny_pair, path):
    expert = converted(tiny_pair[0], path)
    head = kernels.with_kernels(random_head(expert), path)
    assert torch.allclose(head.readout, kernels.dense_weight(expert.lm_head)[head.vocab])


def test_the_bytes_a_step_reads():
    model = tiny_random_model(0, layers=2)
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    row = model.config.hidden_size
    assert kernels.step_bytes(model) == 4 * (linear + row)
    assert kernels.step_bytes(converted(model, "prepacked")) == 4 * (linear + row)
    assert kernels.step_bytes(converted(model, "int8")) == linear + 4 * row
    assert kernels.step_bytes(copy.deepcopy(model).to(torch.bfloat16)) == 2 * (linear + row)


def test_the_roofline_arithmetic():
    rows = [{"seconds": {"p": {1: [0.010, 0.012], 2: [0.011, 0.018]}}},
            {"seconds": {"p": {1: [0.020, 0.020], 2: [0.030, 0.030]}}}]
    out = kernels.roofline(rows, {"p": 1000}, bandwidth=100_000.0)["p"]
    assert out["limit_seconds"] == pytest.approx(0.01)
    assert out["step_seconds"] == pytest.approx(0.0155)  # median of the prompts' medians 0.011 and 0.020
    assert out["step_over_limit"] == pytest.approx(1.55)
    assert out["r"][1] == 1.0 and out["r"][2] == pytest.approx(1.4)  # the median of the prompts 1.3 and 1.5


def test_measure_and_fidelity_on_tiny_models(tiny_pair):
    pairs = {"fp32 eager": tiny_pair, "int8": tuple(converted(m, "int8") for m in tiny_pair)}
    prompts = [torch.tensor([[1, 2, 3, 4, 5, 6]]), torch.tensor([[2, 3, 4, 5, 6, 7]])]
    rows = kernels.measure({name: e for name, (e, _) in pairs.items()}, prompts, max_tokens=3, repeats=2)
    assert [sorted(row["seconds"]["int8"]) for row in rows] == [[1, 2, 3]] * 2
    assert all(len(t) == 2 for row in rows for per_n in row["seconds"].values() for t in per_n.values())
    out = kernels.fidelity(pairs, prompts, max_new_tokens=6)
    assert out["fp32 eager"]["argmax_agreement"] == 1.0 and out["fp32 eager"]["step_vs_pass"] < 1e-4
    assert out["fp32 eager"]["greedy_identical"] == 2 and 0 <= out["int8"]["argmax_agreement"] <= 1


def test_bf16_is_left_out_with_its_probe_where_the_cpu_lacks_bf16(tiny_pair):
    class Tiny:  # the two fields of a Pair that paths() reads
        expert, amateur = tiny_pair

    assert list(kernels.paths(Tiny, bf16=False)) == ["fp32 eager", "fp32 prepacked", "int8"]
    assert "bf16 eager" in kernels.paths(Tiny)
    probe = kernels.bf16_probe(tiny_pair[0], torch.tensor([[1, 2, 3]]), repeats=2)
    assert sorted(probe) == ["bf16_step_seconds", "fp32_step_seconds"] and min(probe.values()) > 0
    result = {"settings": {"prompts": 1, "repeats": 1}, "bandwidth_bytes_per_second": 1e10, "command": "c",
              "machine": {"cpu_kind": "a CPU"}, "left_out": {"bf16 eager": probe},
              "roofline": {"int8": {"step_seconds": 0.01, "step_over_limit": 2.0, "limit_seconds": 0.005,
                                    "r": {str(n): 1.0 for n in range(1, 17)}}},
              "fidelity": {"int8": {"greedy_identical": 1, "prompts": 1}}}
    assert "bf16 eager left out (no bf16 instructions" in kernels.readme_row(result)


@pytest.mark.pocket
@pytest.mark.parametrize("path", PATHS)
def test_the_pocket_pair_on_a_path(pocket, path):
    """prepacked: the same expert, so both drafters reproduce its greedy text; int8: a different expert that loads,
    counts the same weights, and drafts (its greedy identity is measured by fidelity(), not promised)."""
    pair = load_pair("pocket", kernels=path)
    head = kernels.with_kernels(load_head(pair.expert), path)
    ids = pair.encode_chat(read_prompts(EVAL_PROMPTS)[0])
    greedy = {"max_new_tokens": 16, "temperature": 0.0, "eos_token_id": pair.eos_token_id}
    reference = naive(pair.expert, ids, **greedy).new_token_ids
    by_head = head_speculative(pair.expert, head, ids, gamma=3, **greedy).new_token_ids
    by_draft = speculative(pair.expert, pair.amateur, ids, gamma=3, **greedy).new_token_ids
    assert f"{path} linear layers" in pair.describe()
    assert count_parameters(pair.expert) == count_parameters(pocket.expert), "the tied LM head is counted once"
    if path == "prepacked":
        assert by_head == reference == by_draft
    else:
        assert by_head and by_draft and reference


def test_readme_holds_the_rendered_row_of_every_committed_kernels_file():
    assert_readme_rows("kernels-*.json", kernels.readme_row)


def test_bad_paths_get_clear_errors():
    with pytest.raises(ValueError, match="choose one of"):
        kernels.check_kernels("fast", "cpu")
    with pytest.raises(ValueError, match="CPU path"):
        kernels.check_kernels("int8", "cuda")
    with pytest.raises(ValueError, match="choose one of"):
        load_pair("pocket", kernels="compiled")
    with pytest.raises(ValueError, match="kernels='eager'"):
        load_pair("pocket", amateur="self-fp16", kernels="prepacked")
    with pytest.raises(ValueError, match="fp32 or bf16"):
        kernels.with_kernels(tiny_random_model(0).half(), "prepacked")
