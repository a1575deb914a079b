"""bench/groupnorm_paths.py without a GPU: the models (fp32, fp16) fuse to four FusedGroupNorms
each, and collect() names the kernel each output ran through (one input per kernel path), from
the engine inspector's data types where the run has them, else from the errors."""

from __future__ import annotations

import json

import pytest

from bench import groupnorm_paths as gp


def _report(errors: dict[str, float], passed: bool = True) -> dict:
    return {"backend": "trt", "passed": passed, "max_abs": max(errors.values()),
            "checks": [{"output": o, "max_abs": e, "atol": 1e-4, "rtol": 1e-3, "passed": passed}
                       for o, e in errors.items()]}  # fmt: skip


def test_collect_names_the_kernel_by_the_precision_each_plugin_ran_in(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSION_COMMIT", "abc1234")
    monkeypatch.setenv("FUSION_DIRTY", "0")
    (tmp_path / "verify_fp32.json").write_text(json.dumps(_report({"ya": 4e-6, "yb": 5e-6, "yc": 1e-5, "yd": 2e-5})))
    # fp16 build: ya kept fp32 (same error), the others ran in fp16
    (tmp_path / "verify_fp16.json").write_text(json.dumps(_report({"ya": 4e-6, "yb": 3e-3, "yc": 5e-3, "yd": 4e-3})))
    out = tmp_path / "r.json"
    data = gp.collect(tmp_path, "8.5.3.1", out, device="H100")
    assert json.loads(out.read_text()) == data
    assert data["meta"]["commit"] == "abc1234" and data["meta"]["device"] == "H100"
    kernels = {p: {o["output"]: (o["plugin_ran_in"], o["kernel"]) for o in r["outputs"]} for p, r in data["runs"].items()}
    # one input per kernel path of the launch policy on an H100
    assert kernels["fp32"] == {"ya": ("fp32", "fusion_groupnorm_staged_f32_v4_k40"),
                               "yb": ("fp32", "fusion_groupnorm_stream_f32_v4"),
                               "yc": ("fp32", "fusion_groupnorm_stream_f32_v4"),
                               "yd": ("fp32", "fusion_groupnorm_stream_f32_v4")}  # fmt: skip
    assert kernels["fp16"] == {"ya": ("fp32", "fusion_groupnorm_staged_f32_v4_k40"),
                               "yb": ("fp16", "fusion_groupnorm_wide_f16_v8_k48"),  # in 512 threads
                               "yc": ("fp16", "fusion_groupnorm_wide_f16_v8_k48"),
                               "yd": ("fp16", "fusion_groupnorm_stream_f16_v8")}  # fmt: skip


def test_collect_takes_the_precision_from_the_engine_inspector(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSION_COMMIT", "abc1234")
    errors = {"ya": 4e-6, "yb": 5e-6, "yc": 1e-5, "yd": 2e-5}
    for run in ("fp32", "fp16"):
        (tmp_path / f"verify_{run}.json").write_text(json.dumps(_report(errors)))
    # errors equal to fp32's, but the inspector saw yc's layer read fp16
    (tmp_path / "layers_fp16.json").write_text(json.dumps({"ya": "fp32", "yb": "fp32", "yc": "fp16", "yd": "fp32"}))
    # the fp16 model: without the inspector's word its errors say nothing (a different model), so fp16
    (tmp_path / "verify_fp16_io.json").write_text(json.dumps(_report({"ya": 4e-6, "yb": 3e-3, "yc": 3e-3, "yd": 4e-3})))
    (tmp_path / "layers_fp16_io.json").write_text(json.dumps({o: "fp16" for o in ("yb", "yc", "yd")}))
    data = gp.collect(tmp_path, "8.5.3.1", tmp_path / "r.json", device="H100")
    ran = {p: {o["output"]: (o["plugin_ran_in"], o["seen_by"]) for o in r["outputs"]} for p, r in data["runs"].items()}
    assert ran["fp32"]["yc"] == ("fp32", "error")
    assert ran["fp16"]["yc"] == ("fp16", "inspector") and ran["fp16"]["yb"] == ("fp32", "inspector")
    assert data["runs"]["fp16_io"]["model"] == "gn16" and data["runs"]["fp16_io"]["precision"] == "fp16"
    assert ran["fp16_io"]["ya"] == ("fp16", "error") and ran["fp16_io"]["yb"] == ("fp16", "inspector")
    kernels = {o["output"]: o["kernel"] for o in data["runs"]["fp16_io"]["outputs"]}
    assert kernels == {"ya": "fusion_groupnorm_reg_f16_v8_k80", "yb": "fusion_groupnorm_wide_f16_v8_k48",
                       "yc": "fusion_groupnorm_wide_f16_v8_k48", "yd": "fusion_groupnorm_stream_f16_v8"}  # fmt: skip


def test_collect_needs_both_reports(tmp_path):
    (tmp_path / "verify_fp32.json").write_text(json.dumps(_report({"ya": 1e-6})))
    with pytest.raises(FileNotFoundError):
        gp.collect(tmp_path, "8.5.3.1", tmp_path / "r.json", device="H100")


def test_the_model_fuses_every_groupnorm(tmp_path):
    pytest.importorskip("torch")
    gp.make_models(tmp_path)
    import onnx

    for name, elem in (("gn", onnx.TensorProto.FLOAT), ("gn16", onnx.TensorProto.FLOAT16)):
        fused = onnx.load(tmp_path / f"{name}_fused.onnx")
        assert [n.op_type for n in fused.graph.node if n.op_type == "FusedGroupNorm"] == ["FusedGroupNorm"] * 4
        assert [o.name for o in fused.graph.output] == list(gp.PATHS)
        assert {i.type.tensor_type.elem_type for i in fused.graph.input} == {elem}
