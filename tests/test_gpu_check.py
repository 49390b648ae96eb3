"""helpers.gpu_check: the CPU half of the GPU run (the transfer in parts, every check, the result file)."""

from __future__ import annotations

import json

import pytest
import torch

from helpers import gpu_check
from helpers.models import POCKET_GGUF, _sha256


def test_a_file_split_into_parts_is_joined_back_and_checked(tmp_path, monkeypatch):
    original = tmp_path / "model.gguf"
    original.write_bytes(torch.randint(0, 256, (5 << 20,), generator=torch.Generator().manual_seed(0),
                                       dtype=torch.uint8).numpy().tobytes())
    parts = gpu_check.pack(original, tmp_path / "pack", part_mib=2)
    assert [p.stat().st_size for p in parts] == [2 << 20, 2 << 20, 1 << 20]
    assert (tmp_path / "pack" / "python" / "gguf" / "__init__.py").exists(), "the gguf package travels along"
    digest = _sha256(original)
    monkeypatch.setattr(gpu_check, "POCKET_GGUF_SHA256", digest)
    joined = gpu_check.unpack(tmp_path / "pack", cache=tmp_path / "cache")
    assert joined == tmp_path / "cache" / "gguf" / POCKET_GGUF and joined.read_bytes() == original.read_bytes()
    parts[1].unlink()  # a part that did not arrive
    with pytest.raises(RuntimeError, match="sha256"):
        gpu_check.unpack(tmp_path / "pack", cache=tmp_path / "cache")
    with pytest.raises(FileNotFoundError, match="gpu_check pack"):
        gpu_check.unpack(tmp_path / "empty")


def test_one_enumerated_round_is_exact_on_the_device():
    assert all(error < gpu_check.EXACT_TOLERANCE for error in gpu_check.check_exactness(torch.device("cpu")).values())


@pytest.mark.pocket
def test_the_whole_run_on_the_cpu_writes_every_claim(tmp_path):
    out = tmp_path / "speed.json"
    result = gpu_check.run("cpu", quick=True, out=out)
    assert json.loads(out.read_text())["claims"] == result["claims"]
    assert set(result["dtypes"]) == {"float32", "bfloat16"}
    assert all(result["claims"].values()), result["claims"]
    for data in result["dtypes"].values():
        names = {c["name"] for c in data["bench"]["configurations"]}
        assert {"naive", "speculative_g1", "head_g2"} <= names
        assert data["r_by_tokens"]["1"] == 1.0


def test_without_cuda_the_command_says_what_to_do(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit):
        gpu_check.main(["run", "--device", "cuda"])
    assert "--device cpu" in capsys.readouterr().err
