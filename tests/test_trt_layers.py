"""Per-layer engine profiles (fusion/trt/layers.py) on the CPU: a stand-in engine whose context
reports layer times to the profiler it is given, and an engine inspector's JSON."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fusion.errors import VerifyError
from fusion.trt import layers

INSPECTOR = {"Layers": [
    {"Name": "{ForeignNode[/encoder/layer.0/MatMul...]}", "LayerType": "Myelin"},
    {"Name": "LayerNorm_0", "LayerType": "PluginV2", "TacticName": "",
     "Inputs": [{"Format/Datatype": "Row major linear FP32"}], "Outputs": [{"Format/Datatype": "Row major linear FP32"}]},
    {"Name": "Reformatting CopyNode for Input Tensor 0 to LayerNorm_0", "LayerType": "Reformat"},
]}  # fmt: skip
# per run: layer -> ms (the context reports these in this order)
TIMES = {"{ForeignNode[/encoder/layer.0/MatMul...]}": 0.5, "LayerNorm_0": 0.02,
         "Reformatting CopyNode for Input Tensor 0 to LayerNorm_0": 0.01, "Shuffle_3": 0.003}  # fmt: skip


class FakeIProfiler:
    def __init__(self):
        pass


class FakeTrt:
    IProfiler = FakeIProfiler

    class LayerInformationFormat:
        JSON = "json"


class FakeInspector:
    def get_engine_information(self, fmt):
        assert fmt == "json"
        return json.dumps(INSPECTOR)


class FakeEngine:
    def create_engine_inspector(self):
        return FakeInspector()


class FakeContext:
    def __init__(self, fail: bool):
        self.profiler, self.runs, self.fail = None, 0, fail

    def execute_v2(self, bindings):
        self.runs += 1
        for name, ms in TIMES.items():
            self.profiler.report_layer_time(name, ms * (1 + 0.1 * (self.runs % 3)))
        return not self.fail


class FakeBound:
    def __init__(self, fail: bool):
        self.context, self.api, self.bindings, self.freed = FakeContext(fail), "v2", [1, 2], False

    def free(self):
        self.freed = True


class FakeSession:
    made: list = []

    def __init__(self, built, fail=False):
        self.trt, self.engine, self.closed, self.fail = FakeTrt, FakeEngine(), False, fail
        FakeSession.made.append(self)

    def bind(self, feed, stream):
        self.bound = FakeBound(self.fail)
        return self.bound

    def close(self):
        self.closed = True


class FakeStream:
    def free(self):
        pass


class FakeCuda:
    Stream = FakeStream


@pytest.fixture
def fake(monkeypatch):
    FakeSession.made = []
    monkeypatch.setattr(layers, "EngineSession", FakeSession)
    monkeypatch.setattr(layers, "_cuda", lambda: FakeCuda)
    return FakeSession


def test_profile_groups_layers_by_kind_and_skips_warmup(fake):
    prof = layers.profile_layers(object(), {"x": np.zeros((2, 3), np.float32)}, runs=5, warmup=2)
    s = fake.made[0]
    assert s.bound.context.runs == 7 and s.bound.freed and s.closed
    kinds = {t.name: t.kind for t in prof.layers}
    assert kinds == {"{ForeignNode[/encoder/layer.0/MatMul...]}": "myelin", "LayerNorm_0": "plugin",
                     "Reformatting CopyNode for Input Tensor 0 to LayerNorm_0": "reformat",
                     "Shuffle_3": "data movement"}  # fmt: skip
    # runs 3..7 scale by 1 + 0.1 * (run % 3): 1.0, 1.1, 1.2, 1.0, 1.1 -> median 1.1
    assert prof.layers[0].ms == pytest.approx(0.55)
    by = prof.by_kind()
    assert list(by) == ["myelin", "plugin", "reformat", "data movement"]  # largest first
    assert by["plugin"] == {"ms": pytest.approx(0.022), "layers": 1}
    assert prof.total_ms == pytest.approx(1.1 * sum(TIMES.values()))
    assert "Row major linear FP32" in prof.layers[1].detail and prof.layers[1].detail.startswith("PluginV2")
    d = prof.to_dict(top=2)
    assert d["layers"] == 4 and [t["name"] for t in d["top"]] == [prof.layers[0].name, "LayerNorm_0"]
    assert d["shapes"] == {"x": [2, 3]}
    text = prof.text()
    assert "4 layers" in text and "myelin" in text and "LayerNorm_0" in text


def test_failed_execution_is_an_error_and_frees_buffers(monkeypatch, fake):
    monkeypatch.setattr(layers, "EngineSession", lambda built: FakeSession(built, fail=True))
    with pytest.raises(VerifyError, match="failed while profiling"):
        layers.profile_layers(object(), {"x": np.zeros(2, np.float32)}, runs=1, warmup=0)
    assert fake.made[0].bound.freed and fake.made[0].closed


@pytest.mark.parametrize(("name", "layer_type", "kind"), [
    ("LayerNorm_3", "PluginV2", "plugin"),
    ("anything", "Myelin", "myelin"),
    ("{ForeignNode[a...b]}", "", "myelin"),
    ("Reformatting CopyNode for Output Tensor 0", "", "reformat"),
    ("MatMul_12", "CaskGemmMatrixMultiply", "matmul"),
    ("PWN(Add_5, Relu_6)", "PointWiseV2", "pointwise"),
    ("Softmax_1", "", "softmax"),
    ("ReduceMean_2", "", "reduce"),
    ("mystery", "", "other"),
])  # fmt: skip
def test_classify(name, layer_type, kind):
    assert layers.classify(name, layer_type) == kind


def test_inspector_failure_still_classifies_by_name():
    class Broken:
        def create_engine_inspector(self):
            raise RuntimeError("built without DETAILED verbosity")

    assert layers.inspector_layers(Broken(), FakeTrt) == {}
