"""helpers.colab: what the notebooks' first cell installs on Colab (the Colab run itself is in test_colab_run.py)."""

from __future__ import annotations

import pytest

from helpers.colab import RUNTIME, pinned_versions, to_install

PINS = pinned_versions()


def test_every_runtime_package_is_pinned():
    assert set(RUNTIME) <= set(PINS)
    assert PINS["torch"] == "2.13.0"


def test_colab_keeps_its_own_torch_numpy_matplotlib_whatever_their_version():
    colab = {"torch": "2.1.0+cu121", "numpy": "1.26.4", "matplotlib": "3.7.1", "transformers": PINS["transformers"],
             "gguf": PINS["gguf"], "accelerate": "9.0.0", "safetensors": PINS["safetensors"], "tqdm": PINS["tqdm"]}
    assert to_install(colab, PINS) == []


def test_missing_and_too_old_packages_are_installed_at_the_pinned_version():
    colab = {"torch": "2.8.0", "numpy": "2.0.2", "matplotlib": "3.10.0", "transformers": "4.57.1", "gguf": None,
             "accelerate": PINS["accelerate"], "safetensors": PINS["safetensors"], "tqdm": PINS["tqdm"]}
    assert to_install(colab, PINS) == [f"transformers=={PINS['transformers']}", f"gguf=={PINS['gguf']}"]
    assert f"torch=={PINS['torch']}" in to_install({**colab, "torch": None}, PINS)


def test_a_malformed_requirement_is_named(tmp_path):
    path = tmp_path / "requirements.txt"
    path.write_text("torch>=2\n")
    with pytest.raises(ValueError, match="name==version"):
        pinned_versions(path)
