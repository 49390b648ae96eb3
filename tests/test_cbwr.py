"""helpers.cbwr: the suite's MKL code path rounds a product like the expert's differently from the native one."""

from __future__ import annotations

import os

import pytest

from helpers import cbwr


def test_the_suites_regime_rounds_differently_from_the_native_one():
    """tests/conftest.py set MKL_CBWR before torch loaded: nbval's comparison of committed (native) outputs with
    fresh ones is a comparison across two float regimes."""
    assert os.environ["MKL_CBWR"] == cbwr.other_regime()
    assert cbwr.product_bits(None) != cbwr.product_bits(os.environ["MKL_CBWR"])


def test_the_probe_is_deterministic_within_a_regime():
    assert cbwr.product_bits(None) == cbwr.product_bits(None)


def test_the_fastest_path_that_differs_is_chosen(monkeypatch):
    bits = {None: "n", "AVX2": "n", "AVX": "a", "COMPATIBLE": "c"}  # a CPU whose native path is AVX2
    monkeypatch.setattr(cbwr, "product_bits", bits.get)
    assert cbwr.other_regime.__wrapped__() == "AVX"


def test_no_path_that_differs_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(cbwr, "product_bits", lambda _: "same")
    with pytest.raises(RuntimeError, match="set MKL_CBWR"):
        cbwr.other_regime.__wrapped__()
