"""Models beyond protobuf's 2 GB: weights stay external, are streamed to the output's own data
file, and an in-memory model too big for one protobuf is written with external data.

Normal runs exercise those code paths at small scale by lowering the limit
(``fusion.ir.model_io.PROTOBUF_LIMIT``) and the copy chunk; the real > 2 GB model is a slow test
(FUSION_SLOW_TESTS=1).  Peak memory and time at >= 4 GB: bench/bench_scale.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto

import fusion
from fusion.ir import model_io

from .builders import NORM_FC_CLI, NORM_FC_PASSES, run

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from bench_scale import Weights, cli_peak, stack  # (the benchmark's generator)


@pytest.fixture
def small_limits(monkeypatch):
    """A 3 MiB "protobuf limit" and 64 KiB copy chunks: the > 2 GB paths at small scale."""
    monkeypatch.setattr(model_io, "PROTOBUF_LIMIT", 3 << 20)
    monkeypatch.setattr(model_io, "_CHUNK", 64 << 10)


def _external_stack(d: Path, layers: int = 2, hidden: int = 256) -> onnx.ModelProto:
    """A LayerNorm/FC stack whose weights (1 MiB each) live in d/weights.bin."""
    w = Weights(d, threshold=64 << 10)
    model = stack(layers, hidden, w)
    w.close()
    onnx.save(model, str(d / "model.onnx"))
    return model


def _feeds(hidden: int = 256) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(0).standard_normal((2, 3, hidden)).astype(np.float32)}


def _sha(path: Path, offset: int, length: int) -> str:
    with open(path, "rb") as f:
        f.seek(offset)
        return hashlib.sha256(f.read(length)).hexdigest()


def _ext(t: TensorProto) -> dict:
    return {e.key: e.value for e in t.external_data}


def test_external_weights_beyond_the_limit_are_streamed_to_the_output(tmp_path, small_limits):
    src = tmp_path / "in"
    src.mkdir()
    model = _external_stack(src)
    total = (src / "weights.bin").stat().st_size
    assert total > model_io.PROTOBUF_LIMIT  # "bigger than protobuf can hold"
    out = tmp_path / "out" / "fused.onnx"
    out.parent.mkdir()
    result = fusion.fuse_file(src / "model.onnx", out, NORM_FC_PASSES)
    assert result.counts() == {"layernorm": 2, "gemm": 4}
    raw = onnx.load(str(out), load_external_data=False)
    assert out.stat().st_size < 1 << 20  # the weights are not in the model file
    data = out.with_name("fused.onnx.data")
    assert data.stat().st_size >= total
    original = {t.name: t for t in model.graph.initializer}
    moved = [t for t in raw.graph.initializer if t.data_location == TensorProto.EXTERNAL]
    assert len(moved) == 4  # the four FC weights, byte for byte
    for t in moved:
        a, b = _ext(original[t.name]), _ext(t)
        assert b["location"] == data.name
        assert _sha(src / a["location"], int(a["offset"]), int(a["length"])) == _sha(data, int(b["offset"]), int(b["length"]))
    # And it computes what the input does.
    want = run(onnx.load(str(src / "model.onnx")), _feeds())[0]
    np.testing.assert_allclose(run(onnx.load(str(out)), _feeds())[0], want, atol=1e-4)


def test_weights_are_not_read_to_fuse(tmp_path, small_limits, monkeypatch):
    """Matching and validation never read the external weights: only saving copies them."""
    src = tmp_path / "in"
    src.mkdir()
    _external_stack(src)
    real_open = open
    reads = []

    weights = str((src / "weights.bin").resolve())

    def spy(file, mode="r", *a, **kw):
        if isinstance(file, (str, os.PathLike)) and os.path.realpath(file) == weights:
            reads.append(mode)
        return real_open(file, mode, *a, **kw)

    monkeypatch.setattr("builtins.open", spy)
    from fusion.passes import driver as passes

    loaded = model_io.load(src / "model.onnx")
    result = passes.run(loaded.proto, passes.rules_for(None), base_dir=loaded.base_dir, validate=True, inplace=True)
    # Every registered rule runs here, the skip norms too (off by default, not when listed like
    # this): the second LayerNorm follows a residual Add and fuses with it.
    assert result.counts() == {"skiplayernorm": 1, "layernorm": 1, "gemm": 4}
    assert reads == []


def test_in_memory_model_beyond_the_limit_is_written_with_external_data(tmp_path, small_limits):
    """The ModelProto itself is over the limit (weights embedded): its big tensors move out."""
    model = stack(2, 256, Weights(None))  # everything embedded
    assert model.ByteSize() > model_io.PROTOBUF_LIMIT
    fused = fusion.fuse(model, NORM_FC_PASSES)
    out = tmp_path / "fused.onnx"
    model_io.save(fused, out)
    raw = onnx.load(str(out), load_external_data=False)
    assert model_io.external_tensors(raw)
    assert raw.ByteSize() < model_io.PROTOBUF_LIMIT
    assert (tmp_path / "fused.onnx.data").exists()
    np.testing.assert_allclose(run(onnx.load(str(out)), _feeds())[0], run(model, _feeds())[0], atol=1e-4)


def test_cli_writes_over_its_input_beyond_the_limit(tmp_path, small_limits):
    """In place, with the weights in the file the output's data would be named: atomic, and
    the input's data is never overwritten before the model that needs it is replaced."""
    _external_stack(tmp_path)
    model = tmp_path / "model.onnx"
    raw = onnx.load(str(model), load_external_data=False)
    for t in raw.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = "model.onnx.data"
    (tmp_path / "weights.bin").rename(tmp_path / "model.onnx.data")
    model.write_bytes(raw.SerializeToString())
    want = run(onnx.load(str(model)), _feeds())[0]
    result = fusion.fuse_file(model, model, NORM_FC_PASSES)
    assert result.counts() == {"layernorm": 2, "gemm": 4}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx", "model.onnx.1.data"]
    np.testing.assert_allclose(run(onnx.load(str(model)), _feeds())[0], want, atol=1e-4)


# -- the real thing ----------------------------------------------------------------------------


@pytest.mark.slow
def test_model_over_2_gib_fuses_through_the_cli(tmp_path):
    """2.5 GiB of external weights: fused by the CLI, the output's data file written, weights
    byte-identical; peak RSS well under the weights."""
    src = tmp_path / "in"
    src.mkdir()
    w = Weights(src)
    model = stack(5, 4096, w)  # 5 x 2 x (4096 x 16384) fp32 = 2.5 GiB
    w.close()
    onnx.save(model, str(src / "model.onnx"))
    total = (src / "weights.bin").stat().st_size
    assert total > 2**31
    out = tmp_path / "fused.onnx"
    r = cli_peak(["fuse", str(src / "model.onnx"), "-o", str(out), *NORM_FC_CLI, "--json"])
    assert r["rc"] == 0, r["stderr"]
    assert len(json.loads(r["stdout"])["fusions"]) == 5 * 3
    assert r["peak_rss_mib"] < 512  # the weights were streamed, not loaded
    data = tmp_path / "fused.onnx.data"
    assert data.stat().st_size >= total
    original = {t.name: t for t in model.graph.initializer}
    for t in onnx.load(str(out), load_external_data=False).graph.initializer:
        if t.data_location == TensorProto.EXTERNAL:
            a, b = _ext(original[t.name]), _ext(t)
            n = min(int(a["length"]), 1 << 20)
            assert _sha(src / a["location"], int(a["offset"]), n) == _sha(data, int(b["offset"]), n)
