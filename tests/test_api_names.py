"""One keyword per concept: ``passes=`` on every entry point; the old spellings still work, with a
DeprecationWarning, for one release."""

from __future__ import annotations

import warnings
from pathlib import Path

import onnx
import pytest

import fusion
from fusion.errors import FusionError

EXAMPLE = Path(fusion.__file__).resolve().parent / "examples" / "bert_tiny.onnx"  # 5 LayerNorms, 13 FCs


@pytest.fixture(scope="module")
def model() -> onnx.ModelProto:
    return onnx.load(EXAMPLE)


def _ops(m: onnx.ModelProto) -> dict[str, int]:
    out: dict[str, int] = {}
    for n in m.graph.node:
        out[n.op_type] = out.get(n.op_type, 0) + 1
    return out


def _quiet(fn, *args, **kwargs):
    """Call, failing on any DeprecationWarning: the new spelling must not warn."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        return fn(*args, **kwargs)


def test_passes_keyword_everywhere(model, tmp_path):
    assert _quiet(fusion.run, model, passes=["layernorm"], validate=False).counts() == {"layernorm": 5}
    assert _quiet(fusion.inspect, model, passes=["gemm"]).counts() == {"gemm": 13}
    assert _ops(_quiet(fusion.fuse, model, passes=["layernorm"]))["FusedLayerNorm"] == 5
    assert "FusedFC" not in _ops(_quiet(fusion.fuse, model, passes=["layernorm"]))
    r = _quiet(fusion.fuse_file, EXAMPLE, tmp_path / "f.onnx", passes=["gemm"], validate=False)
    assert r.counts() == {"gemm": 13}
    assert "FusedLayerNorm" not in _ops(_quiet(fusion.fuse_layernorm, model, passes=["rmsnorm"]))
    assert _ops(_quiet(fusion.fuse_layernorm, model, passes=["layernorm"]))["FusedLayerNorm"] == 5
    assert _ops(_quiet(fusion.fuse_gemm, model, passes=["gemm"]))["FusedFC"] == 13


def test_passes_positionally_is_not_deprecated(model, tmp_path):
    assert _quiet(fusion.run, model, ["gemm"], validate=False).counts() == {"gemm": 13}
    assert _quiet(fusion.inspect, model, ["layernorm"]).counts() == {"layernorm": 5}
    assert "FusedFC" not in _ops(_quiet(fusion.fuse, model, ["layernorm"]))
    assert _quiet(fusion.fuse_file, EXAMPLE, tmp_path / "f.onnx", ["layernorm"], validate=False).counts() == {"layernorm": 5}


@pytest.mark.parametrize(
    "call, expect",
    [
        (lambda m, d: fusion.fuse(m, passes_=["layernorm"]), "FusedLayerNorm"),
        (lambda m, d: fusion.inspect(m, passes_=["layernorm"]), {"layernorm": 5}),
        (lambda m, d: fusion.run(m, pass_names=["gemm"], validate=False), {"gemm": 13}),
        (lambda m, d: fusion.fuse_file(EXAMPLE, d / "f.onnx", pass_names=["gemm"], validate=False), {"gemm": 13}),
    ],
    ids=["fuse-passes_", "inspect-passes_", "run-pass_names", "fuse_file-pass_names"],
)
def test_old_spellings_still_work_and_warn(model, tmp_path, call, expect):
    with pytest.warns(DeprecationWarning, match=r"(passes_|pass_names)= is deprecated; use passes="):
        out = call(model, tmp_path)
    if isinstance(expect, str):
        ops = _ops(out)
        assert ops[expect] == 5 and "FusedFC" not in ops
    else:
        assert out.counts() == expect


def test_new_keyword_wins_over_the_old_one(model):
    with pytest.warns(DeprecationWarning):
        assert fusion.run(model, passes=["gemm"], pass_names=["layernorm"], validate=False).counts() == {"gemm": 13}


def test_fuse_helpers_take_only_their_own_passes(model):
    with pytest.raises(FusionError, match=r"^pass 'gemm' is not one of this function's \(layernorm, rmsnorm\)$"):
        fusion.fuse_layernorm(model, passes=["gemm"])
    with pytest.raises(FusionError, match=r"^pass 'layernorm' is not one of this function's \(gemm\)$"):
        fusion.fuse_gemm(model, passes=["layernorm"])


def test_tune_takes_passes_too(monkeypatch):
    from tests.test_tune import PROFILE, FakeBench

    from fusion import tuning

    monkeypatch.setattr(tuning, "EngineBench", FakeBench)
    res = _quiet(fusion.tune, str(EXAMPLE), target="plugin", profile=PROFILE, passes=["layernorm"])
    assert res.result.counts() == {"layernorm": 5}
    with pytest.warns(DeprecationWarning, match=r"^passes_= is deprecated; use passes=$"):
        res = fusion.tune(str(EXAMPLE), target="plugin", profile=PROFILE, passes_=["layernorm"])
    assert res.result.counts() == {"layernorm": 5}
