"""Engine timing (fusion/trt/timing.py) on the CPU: a stand-in engine with both TensorRT APIs
(binding arrays for 8.x, tensor addresses for 10), a stand-in polygraphy.cuda and CUDA timer."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import fusion
from fusion.trt import build as ftrt
from fusion.trt import timing as trt_timing
from fusion.trt.build import BuiltEngine
from fusion.trt.profiles import InputInfo, derive_profiles
from fusion.trt.timing import LatencyReport, LatencyRow, Timing, summarize
from tests import trt_fake

D = 16
PROFILES = [{"batch": (1, 1, 2)}, {"batch": (3, 4, 8)}]


ALLOCATED: list = []


class FakeDeviceArray:
    count = 0

    def __init__(self, shape, dtype):
        FakeDeviceArray.count += 1
        self.shape, self.dtype, self.ptr = tuple(shape), np.dtype(dtype), 0x1000 * FakeDeviceArray.count
        self.data = np.zeros(self.shape, self.dtype)
        self.freed = False
        ALLOCATED.append(self)

    def copy_from(self, arr, stream):
        self.data = np.array(arr, copy=True)

    def copy_to(self, host, stream):
        host[...] = self.data

    def free(self):
        self.freed = True


class FakeStream:
    ptr = 0xABC

    def synchronize(self):
        pass

    def free(self):
        pass


class FakeCuda:
    DeviceArray = FakeDeviceArray
    Stream = FakeStream
    arrays: list = []


class FakeTimer:
    """Each launch 'takes' the engine's ms; records which engine launched, in order."""

    log: list = []

    def __init__(self):
        pass

    def time(self, stream_ptr, launch, n):
        for i in range(n):
            launch(i)
        ctx = FakeContext.last
        FakeTimer.log.append((ctx.engine.tag, n))
        return ctx.engine.ms * (1 + 0.01 * (len(FakeTimer.log) % 3))

    def close(self):
        pass


class FakeContext:
    last = None

    def __init__(self, engine, api):
        self.engine, self.profile, self.shapes, self.addresses, self.launches = engine, 0, {}, {}, 0
        if api == "v2":
            self.execute_async_v2 = self._v2

    # 8.x: binding indices
    def set_optimization_profile_async(self, k, stream):
        self.profile = k

    def set_binding_shape(self, idx, shape):
        self.shapes[idx] = tuple(shape)

    def get_binding_shape(self, idx):
        return self.shapes[idx - 1]  # y has x's shape

    def set_shape_input(self, idx, values):
        self.shapes[idx] = tuple(values)

    def _v2(self, bindings, stream):
        assert all(bindings[i] for i in self.engine.live(self.profile)), bindings
        FakeContext.last, self.launches = self, self.launches + 1
        self.bindings = list(bindings)
        return True

    # 10: names
    def set_input_shape(self, name, shape):
        self.shapes[name] = tuple(shape)

    def get_tensor_shape(self, name):
        return self.shapes["x"]

    def set_tensor_address(self, name, ptr):
        self.addresses[name] = ptr

    def execute_async_v3(self, stream):
        assert set(self.addresses) == {"x", "y"}
        FakeContext.last, self.launches = self, self.launches + 1
        return True


class FakeEngine:
    """x [batch, 16] -> y, with two optimization profiles (bindings x, y, x [profile 1], y [profile 1])."""

    def __init__(self, trt, tag, ms, api):
        self.trt, self.tag, self.ms, self.api, self.contexts = trt, tag, ms, api, []
        self.num_bindings, self.num_optimization_profiles, self.num_io_tensors = 4, 2, 2

    def live(self, profile):
        return [2 * profile, 2 * profile + 1]

    def create_execution_context(self):
        self.contexts.append(FakeContext(self, self.api))
        return self.contexts[-1]

    def get_binding_name(self, i):
        return ["x", "y", "x [profile 1]", "y [profile 1]"][i]

    def binding_is_input(self, i):
        return i % 2 == 0

    def get_binding_dtype(self, i):
        return self.trt.DataType.FLOAT

    def is_shape_binding(self, i):
        return False

    get_tensor_name = lambda self, i: ["x", "y"][i]  # noqa: E731
    get_tensor_dtype = lambda self, n: self.trt.DataType.FLOAT  # noqa: E731
    is_shape_inference_io = lambda self, n: False  # noqa: E731

    def get_tensor_mode(self, name):
        return self.trt.TensorIOMode.INPUT if name == "x" else self.trt.TensorIOMode.OUTPUT


@pytest.fixture
def fake_gpu(monkeypatch):
    """A stand-in tensorrt whose Runtime hands out FakeEngines: b'ENGINE:A...' -> tag A, 10 ms."""

    def install(version="8.5.3.1", ms=None):
        trt = trt_fake.make(version=version)
        api = "v2" if version.startswith("8") else "v3"
        speeds = dict(ms or {"A": 10.0, "B": 5.0})
        trt.engines = []

        class Runtime:
            def __init__(self, logger):
                pass

            def deserialize_cuda_engine(self, data):
                tag = bytes(data).decode().split(":", 1)[1][:1] if b":" in bytes(data) else "A"
                trt.engines.append(FakeEngine(trt, tag, speeds.get(tag, 7.0), api))
                return trt.engines[-1]

        trt.Runtime = Runtime
        monkeypatch.setitem(sys.modules, "tensorrt", trt)
        return trt

    monkeypatch.setattr(ftrt, "_PLUGIN_LOGGER", None)
    monkeypatch.setattr(ftrt, "_LOGGER_CLASS", None)
    monkeypatch.setattr(ftrt, "_LOADED_PLUGINS", set())
    monkeypatch.setattr(trt_timing, "_cuda", lambda: FakeCuda)
    monkeypatch.setattr(trt_timing, "CudaTimer", FakeTimer)
    FakeTimer.log = []
    ALLOCATED.clear()
    return install


def built(tag: str) -> BuiltEngine:
    inputs = [InputInfo("x", ("batch", D))]
    profiles = derive_profiles(inputs, [{"batch": (1, 1, 2)}, {"batch": (3, 4, 8)}])
    return BuiltEngine(f"ENGINE:{tag}".encode(), profiles, inputs, "8.5.3.1", "fp32", build_s=1.5)


def feed(batch: int) -> dict:
    return {"x": np.random.default_rng(batch).standard_normal((batch, D)).astype(np.float32)}


@pytest.mark.parametrize("version", ["8.5.3.1", "10.8.0.43"])
def test_time_engines_binds_the_right_profile_and_takes_turns(fake_gpu, version):
    trt = fake_gpu(version)
    (ta, tb), (oa, _ob) = trt_timing.time_engines([built("A"), built("B")], [feed(1), feed(4)], repeats=4,
                                                  target_ms=50, warmup_ms=100, fetch=True)  # fmt: skip
    api = "execute_async_v2" if version.startswith("8") else "execute_async_v3"
    assert [t.api for t in ta + tb] == [api] * 4
    assert ta[0].median_ms == pytest.approx(10.1, rel=0.02) and tb[0].median_ms == pytest.approx(5.05, rel=0.02)
    assert ta[0].launches == 5 and tb[0].launches == 10  # about 50 ms per repetition
    timed = [tag for tag, _ in FakeTimer.log]
    # per feed: probes while warming up (A, A, B, B), then repetitions taking turns
    assert timed[:8] == ["A", "A", "B", "B", "A", "B", "A", "B"]
    a = trt.engines[0]
    assert [c.profile for c in a.contexts] == [0, 1]  # one context per profile, batch 4 on profile 1
    if version.startswith("8"):
        assert a.contexts[1].shapes == {2: (4, D)} and a.contexts[1].bindings[:2] == [0, 0]
    else:
        assert a.contexts[1].shapes == {"x": (4, D)}
    assert oa[1]["y"].shape == (4, D)
    assert len(ALLOCATED) == 8 and all(arr.freed for arr in ALLOCATED)  # 2 engines x 2 feeds x (x, y)


def test_summary_statistics_and_spread():
    t = summarize([1.0, 2.0, 3.0, 4.0, 100.0], 7, "execute_async_v2")
    assert (t.median_ms, t.min_ms, t.max_ms, t.launches, t.repeats) == (3.0, 1.0, 100.0, 7, 5)
    assert t.p10_ms == pytest.approx(1.4) and t.p90_ms == pytest.approx(61.6)
    assert t.to_dict()["spread"] == pytest.approx((61.6 - 1.4) / 3, abs=1e-4)


def test_shape_labels():
    b = built("A")
    assert trt_timing.shape_labels(b.profiles, [feed(1), feed(2), feed(4), feed(5)]) == [
        "p0 opt", "p0 max", "p1 opt", "shape 3"]  # fmt: skip


def test_latency_report_text_dict_html():
    rep = LatencyReport([LatencyRow("opt", {"x": [4, 16]}, Timing(10, 9, 11, 9, 12, 5, 15, "v2"),
                                    Timing(8, 7.9, 8.1, 7.8, 8.2, 6, 15, "v2")),
                         LatencyRow("max", {"x": [8, 16]}, Timing(10, 9, 11, 9, 12, 5, 15, "v2"),
                                    Timing(12.5, 12, 13, 12, 13, 4, 15, "v2"))],
                        build_s={"unfused": 60.0, "fused": 55.5}, method="m")  # fmt: skip
    text = rep.table()
    assert "1.250x faster" in text and "0.800x SLOWER" in text and "engine build: unfused 60.0s, fused 55.5s" in text
    d = rep.to_dict()
    assert [r["speedup"] for r in d["rows"]] == [1.25, 0.8] and d["rows"][0]["fused"]["median_ms"] == 8
    assert '<td class="ok">1.250×</td>' in rep.html() and '<td class="fail">0.800×</td>' in rep.html()
    assert LatencyReport(error="no GPU").table() == "engine latency: not measured (no GPU)"


def _relu_model(tmp_path: Path, tag: str) -> Path:
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name=f"{tag}relu")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", D])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", D])])  # fmt: skip
    p = tmp_path / f"{tag}.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), p)
    return p


def test_verify_latency_builds_the_original_like_the_fused_engine(fake_gpu, tmp_path):
    trt = fake_gpu(ms={"A": 10.0, "B": 5.0})  # the original's layers are named A..., the fused one's B...
    fused = fusion.build_engine(_relu_model(tmp_path, "B"), shapes=PROFILES, tactic_sources=[])
    trt.calls["profiles"].clear()
    rep = trt_timing.verify_latency(str(_relu_model(tmp_path, "A")), fused, [feed(1), feed(4)],
                                    {"tactic_sources": [], "profiles": "ignored", "latency_repeats": 3})  # fmt: skip
    assert not rep.error, rep.error
    assert [r.label for r in rep.rows] == ["p0 opt", "p1 opt"]
    assert [round(r.speedup, 1) for r in rep.rows] == [2.0, 2.0]
    assert len(trt.calls["profiles"]) == 2 and trt.calls["tactics"] == 0  # same profiles and tactic sources
    assert rep.rows[0].fused.repeats == 3


def test_verify_latency_reports_instead_of_raising(fake_gpu, tmp_path):
    trt = fake_gpu()
    fused = fusion.build_engine(_relu_model(tmp_path, "B"), shapes=PROFILES, tactic_sources=[])
    trt.calls["profiles"].clear()
    rep = trt_timing.verify_latency(str(_relu_model(tmp_path, "A")), fused, [{"x": np.zeros((9, D), np.float32)}], {})
    assert "outside every optimization profile" in rep.error and not rep.rows
    assert trt.calls["profiles"] == []  # the fused engine could not be timed: no second build


def test_html_report_shows_the_latency_section():
    from fusion.report.html import _verify_section
    from fusion.compare.verify import OutputCheck, VerifyReport

    t = Timing(4.0, 3.9, 4.1, 3.9, 4.2, 5, 15, "execute_async_v2")
    check = VerifyReport("trt", [{"x": [4, 16]}], [OutputCheck(0, "y", "float", [4, 16], 0, 0, 0, 1e-4, 1e-3, True)])
    assert 'id="latency"' not in _verify_section(check, "")
    check.latency = LatencyReport([LatencyRow("opt", {"x": [4, 16]}, Timing(5.0, 4.9, 5.1, 4.9, 5.2, 5, 15, "v2"), t)],
                                  build_s={"unfused": 1.0, "fused": 2.0}, method="median of 15")  # fmt: skip
    html = _verify_section(check, "")
    assert '<section id="latency"><h2>Engine latency</h2>' in html and '<td class="ok">1.250×</td>' in html
