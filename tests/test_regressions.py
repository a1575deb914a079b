"""Replay every saved failing model (tests/regressions/<hash>.onnx + .json) through the fuzz
properties: the fusion counts it must give, checker, onnxruntime equality, idempotence and
determinism (tests/fuzz/properties.py).  tests/test_fuzz.py adds a file here whenever
hypothesis shrinks a failure; each .json says what the bug was ("note", "error")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .fuzz import properties

SAVED = sorted(properties.REGRESSIONS.glob("*.onnx"))


def test_there_are_saved_regressions():
    assert SAVED, f"no saved models in {properties.REGRESSIONS}"


@pytest.mark.parametrize("path", SAVED, ids=[p.stem for p in SAVED])
def test_saved_model_keeps_every_property(path: Path):
    meta = json.loads(path.with_suffix(".json").read_text())
    case = properties.load_regression(path)
    try:
        properties.check(case)
    except AssertionError as e:
        raise AssertionError(f"{path.name} ({meta.get('note') or meta.get('error')}): {e}") from e
