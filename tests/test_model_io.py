"""Loading and saving: external data kept on disk and streamed, atomic writes, clear errors."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest

import fusion
from fusion.ir import model_io
from fusion.errors import InvalidGraphError, ModelLoadError, OutputError, UnsupportedModelError

from .builders import NORM_FC_PASSES, run
from .norm_models import LAYER, build, feeds


def _save_external(model: onnx.ModelProto, path) -> None:
    """Save with every tensor in one external file (on a copy: onnx.save_model mutates)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    onnx.save_model(copy, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=os.path.basename(str(path)) + ".weights", size_threshold=0)


def test_external_data_is_streamed_to_the_output(tmp_path):
    model = build(LAYER.with_(shape=("B", 4096)))
    src = tmp_path / "in" / "m.onnx"
    src.parent.mkdir()
    _save_external(model, src)
    dst = tmp_path / "out" / "fused.onnx"
    dst.parent.mkdir()
    result = fusion.fuse_file(src, dst, NORM_FC_PASSES)
    assert result.counts() == {"layernorm": 1}
    assert (tmp_path / "out" / "fused.onnx.data").exists()
    fused = onnx.load(str(dst))
    assert all(t.data_location == onnx.TensorProto.DEFAULT for t in fused.graph.initializer)
    raw = onnx.load(str(dst), load_external_data=False)
    assert model_io.external_tensors(raw), "the weights stay external"
    x = feeds(LAYER.with_(shape=("B", 4096)))
    assert np.abs(run(model, x)[0] - run(fused, x)[0]).max() < 1e-4


def test_fusing_in_place_is_atomic_and_works(tmp_path):
    src = tmp_path / "m.onnx"
    _save_external(build(LAYER), src)
    fusion.fuse_file(src, src, NORM_FC_PASSES)
    fused = onnx.load(str(src))
    assert [n.op_type for n in fused.graph.node] == ["FusedLayerNorm"]
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_loads_path_and_returns_self_contained_proto(tmp_path):
    src = tmp_path / "m.onnx"
    _save_external(build(LAYER), src)
    fused = fusion.fuse_layernorm(str(src))
    assert not model_io.external_tensors(fused)


def test_missing_external_data_is_a_clear_error(tmp_path):
    src = tmp_path / "m.onnx"
    _save_external(build(LAYER), src)
    os.remove(tmp_path / "m.onnx.weights")
    with pytest.raises(ModelLoadError, match="missing external data file 'm.onnx.weights'"):
        model_io.load(src)


@pytest.mark.parametrize(
    "content,message",
    [(b"", "empty file"), (b"\x08\x07garbage\xff\xff", "not an ONNX model"), (None, "no such file")],
)
def test_bad_files(tmp_path, content, message):
    path = tmp_path / "bad.onnx"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ModelLoadError, match=message):
        model_io.load(path)


def test_truncated_file(tmp_path):
    data = build(LAYER).SerializeToString()
    path = tmp_path / "t.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelLoadError):
        model_io.load(path)


def test_unsupported_versions():
    m = build(LAYER)
    m.opset_import[0].version = 5
    with pytest.raises(UnsupportedModelError, match="opset 5 is not supported"):
        fusion.fuse_layernorm(m)
    m = build(LAYER)
    m.ir_version = 99
    with pytest.raises(UnsupportedModelError, match="IR version 99"):
        fusion.fuse_layernorm(m)


def test_graph_defects():
    m = build(LAYER)
    m.graph.node[1].input[0] = "nowhere"
    with pytest.raises(InvalidGraphError, match="reads 'nowhere', which nothing defines"):
        fusion.fuse_layernorm(m)
    m = build(LAYER)
    m.graph.node[1].output[0] = m.graph.node[0].output[0]
    with pytest.raises(InvalidGraphError, match="defined more than once"):
        fusion.fuse_layernorm(m)
    m = build(LAYER)
    m.graph.node[0].input[0] = m.graph.node[2].output[0]  # ReduceMean reads the Pow downstream
    with pytest.raises(InvalidGraphError, match="cycle"):
        fusion.fuse_layernorm(m)
    m = build(LAYER)
    del m.graph.node[:]
    with pytest.raises(InvalidGraphError, match="no nodes"):
        fusion.fuse_layernorm(m)


def test_output_errors(tmp_path):
    model = build(LAYER)
    with pytest.raises(OutputError, match="does not exist"):
        model_io.save(model, tmp_path / "missing" / "x.onnx")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        if os.access(ro, os.W_OK):  # root ignores permissions
            pytest.skip("running as root: directories are always writable")
        with pytest.raises(OutputError, match="not writable"):
            model_io.save(model, ro / "x.onnx")
    finally:
        ro.chmod(0o700)


def test_accepts_a_graphsurgeon_graph_and_returns_one():
    import onnx_graphsurgeon as gs

    graph = gs.import_onnx(build(LAYER))
    fused = fusion.fuse_layernorm(graph)
    assert isinstance(fused, gs.Graph)
    assert [n.op for n in fused.nodes] == ["FusedLayerNorm"]


def test_accepts_a_path(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(build(LAYER), str(path))
    fused = fusion.fuse_layernorm(str(path))
    assert [n.op_type for n in fused.graph.node] == ["FusedLayerNorm"]
    report = fusion.verify(str(path), fused)
    assert report.passed, report.table()


def test_verify_stays_callable_after_its_module_is_imported():
    import importlib

    importlib.import_module("fusion.compare.verify")
    assert callable(fusion.verify)


def test_written_files_get_the_usual_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        model_io.save(build(LAYER), tmp_path / "m.onnx")
    finally:
        os.umask(old)
    assert (os.stat(tmp_path / "m.onnx").st_mode & 0o777) == 0o644
