"""bench/trt_e2e_fixtures.py without a GPU: the selection, the int32 variant of the attention
models, the rows, the arguments, and one run against the stand-in tensorrt (tests/trt_fake.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from bench import trt_e2e_fixtures as e2e
from fusion.trt import build as ftrt
from fusion.compare.verify import DEFAULT_EXTRA_CHECKS, OPTIMIZED, verify
from tests import trt_fake
from tests.fixtures.catalog import fixture_path, load_manifest


def test_one_model_per_family_and_precision_op13_first():
    recs = e2e.select()
    families = {r["family"] for r in load_manifest()}
    assert len(recs) == 2 * len(families)
    assert [r["dtype"] for r in recs] == ["fp32"] * len(families) + ["fp16"] * len(families)
    for r in recs:
        assert fixture_path(r).is_file()
        if r["family"] == "rms_torch":  # torch cannot export aten::rms_norm at opset 13
            assert (r["exporter"], r["opset"]) == ("dynamo", 18) and "rms_norm" in r["why"]
        else:
            assert (r["exporter"], r["opset"]) == ("legacy", 13) and "why" not in r


def test_attention_models_run_as_int32_variants_that_compute_the_same():
    notes = {r["file"]: e2e.source_model(r)[1] for r in e2e.select(["bert", "gpt2", "llama", "t5", "vit"])}
    variants = {f for f, n in notes.items() if n and "bool Flatten" in n}
    assert {f.split("_")[0] for f in variants} == {"bert", "gpt2", "llama", "t5"}
    assert not notes["vit_legacy_op13_fp32.onnx"]
    path = fixture_path("bert_legacy_op13_fp32.onnx")
    model, n = e2e.int32_bool_moves(onnx.load(str(path)))
    assert n >= 1 and e2e.has_bool_flatten(onnx.load(str(path))) and not e2e.has_bool_flatten(model)
    onnx.checker.check_model(model)
    # Exactly the same as written; (onnxruntime's optimizing session fuses the two differently,
    # which moves rounding: its check is left out of an exact comparison.)
    rep = verify(str(path), model, extra_checks=[c for c in DEFAULT_EXTRA_CHECKS if c != OPTIMIZED])
    assert rep.passed and rep.max_abs == 0.0


def test_a_model_without_bool_moves_is_left_alone():
    model = onnx.load(str(fixture_path("vit_legacy_op13_fp32.onnx")))
    same, n = e2e.int32_bool_moves(model)
    assert n == 0 and len(same.graph.node) == len(model.graph.node)


def test_isinf_is_written_as_equal_and_computes_the_same():
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N"])
    outs = [helper.make_tensor_value_info(n, TensorProto.BOOL, ["N"]) for n in ("both", "pos", "neg")]
    g = helper.make_graph([helper.make_node("IsInf", ["x"], ["both"]),
                           helper.make_node("IsInf", ["x"], ["pos"], detect_negative=0),
                           helper.make_node("IsInf", ["x"], ["neg"], detect_positive=0)], "g", [x], outs)  # fmt: skip
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    variant, n = e2e.isinf_as_equal(model)
    assert n == 3 and not any(node.op_type == "IsInf" for node in variant.graph.node)
    import onnxruntime as ort

    feed = {"x": np.array([1.0, np.inf, -np.inf, np.nan, 3.4e38, -0.0], np.float32)}
    want = ort.InferenceSession(model.SerializeToString()).run(None, feed)
    got = ort.InferenceSession(variant.SerializeToString()).run(None, feed)
    for a, b in zip(want, got):
        np.testing.assert_array_equal(a, b)
    t5 = next(r for r in e2e.select(["t5"], ("fp16",)))
    built, note = e2e.source_model(t5)
    assert "IsInf" in note and e2e._variant(note) == "int32 bool moves + IsInf as Equal"
    assert verify(str(fixture_path(t5)), built).passed


def test_the_groupnorm_baseline_has_no_instancenormalization_and_computes_the_same():
    path = fixture_path("resnet_gn_legacy_op13_fp32.onnx")
    model = onnx.load(str(path))
    baseline, why = e2e.buildable_baseline(model)
    assert "3 InstanceNormalization" in why
    assert not any(n.op_type == "InstanceNormalization" for n in baseline.graph.node)
    onnx.checker.check_model(baseline)
    assert verify(str(path), baseline).passed
    vit = onnx.load(str(fixture_path("vit_legacy_op13_fp32.onnx")))
    assert e2e.buildable_baseline(vit) == (vit, None)


def _row():
    rec = next(r for r in load_manifest() if r["file"] == "ln_module_legacy_op13_fp32.onnx")
    return e2e.base_row(rec, None)


def test_rows_pass_only_when_built_matched_verified_and_reloaded():
    fused = {"FusedFC": 3, "FusedLayerNorm": 4}
    res = {"built": True, "plugin_layer_counts": {"FusedLayerNorm": 4, "FusedFC": 3}, "max_abs_err": 1e-6,
           "passed": True, "build_s": 1.5, "ms": 0.05}  # fmt: skip
    row = e2e.apply_fused(_row(), fused, res)
    assert row["plugin_layers_match"] and not row["pass"]  # not reloaded yet
    e2e.apply_reload(row, {"passed": True, "max_abs_err": 1e-6})
    assert row["pass"] and row["ratio"] is None
    e2e.apply_unfused(row, {"built": True, "ms": 0.1, "build_s": 9.0, "passed": True})
    assert row["ratio"] == 2.0 and row["unfused_build_s"] == 9.0
    keys = {"family", "model", "precision", "fused_nodes", "plugin_layers", "max_abs_err", "pass", "reload_passed",
            "fused_ms", "unfused_ms", "ratio", "build_s", "note"}  # fmt: skip
    assert keys <= set(row)


def test_rows_fail_on_a_missing_plugin_layer_or_a_foreign_one():
    fused = {"FusedFC": 3, "FusedLayerNorm": 4}
    ok = {"built": True, "passed": True, "ms": 0.05}
    row = e2e.apply_fused(_row(), fused, dict(ok, plugin_layer_counts={"FusedLayerNorm": 4, "FusedFC": 2}))
    e2e.apply_reload(row, {"passed": True})
    assert not row["plugin_layers_match"] and not row["pass"]
    row = e2e.apply_fused(_row(), fused, dict(ok, plugin_layer_counts={"FusedLayerNorm": 4, "FusedFC": 3, "LayerNorm": 1}))
    e2e.apply_reload(row, {"passed": True})
    assert row["other_plugin_layers"] == {"LayerNorm": 1} and not row["pass"]
    row = e2e.apply_fused(_row(), fused, {"built": False, "error": "EngineBuildError: x"})
    assert row["error"] and row["plugin_layers"] is None and not row["pass"]


def test_arguments():
    with pytest.raises(SystemExit):
        e2e.parse_args([])
    with pytest.raises(SystemExit):
        e2e.parse_args(["--plugins", "x.so"])
    a = e2e.parse_args(["--plugins", "x.so", "--out", "o.json", "--budget-s", "10", "--families", "bert"])
    assert a.budget_s == 10 and a.families == "bert" and a.fused_budget_s == 200
    assert e2e.parse_args(["--list"]).list


def test_list_prints_the_selection(capsys):
    assert e2e.main(["--list", "--families", "vit,rms_torch"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [ln.split()[2] for ln in out] == ["vit_legacy_op13_fp32.onnx", "rms_torch_dynamo_op18_fp32.onnx",
                                             "vit_legacy_op13_fp16.onnx", "rms_torch_dynamo_op18_fp16.onnx"]  # fmt: skip


@pytest.fixture
def fake_trt(monkeypatch):
    mod = trt_fake.make(plugin_ops=tuple(e2e.OUR_PLUGINS))
    monkeypatch.setitem(sys.modules, "tensorrt", mod)
    monkeypatch.setattr(ftrt, "_PLUGIN_LOGGER", None)
    monkeypatch.setattr(ftrt, "_LOGGER_CLASS", None)
    monkeypatch.setattr(ftrt, "_LOADED_PLUGINS", set())
    monkeypatch.setattr(ftrt, "_library_problem", lambda source, major: None)  # cuBLAS counts as present here
    return mod


def test_run_against_the_stand_in_writes_rows(fake_trt, tmp_path):
    """The fake builds (no engines run): plugin layers are counted per op, the failed checks are
    rows, not a crash, and the negative family is a row that built nothing."""
    lib = next(Path(np.__file__).parent.rglob("_multiarray_umath*.so"))  # any loadable library: the fake has no registry
    out = tmp_path / "r.json"
    rc = e2e.main(["--plugins", str(lib), "--out", str(out), "--families", "ln_module,vector_norm", "--limit", "2",
                   "--reload-limit-s", "60"])  # fmt: skip
    data = json.loads(out.read_text())
    assert rc == 1 and data["meta"]["tactic_sources"] == "CUBLAS+CUBLAS_LT"
    ln, vn = data["rows"]
    assert ln["fused_nodes"] == {"FusedFC": 3, "FusedLayerNorm": 4} == ln["plugin_layers"]
    assert ln["built"] and ln["plugin_layers_match"] and not ln["pass"] and ln["passed"] is False  # no engines
    assert ln["reload_passed"] is None and "TensorRT is not installed" in ln["reload_error"]
    assert ln["unfused_built"] and "unfused_note" not in ln
    assert fake_trt.calls["tactics"] is not None
    assert vn["built"] is None and "nothing fused" in vn["note"]


def test_realistic_models_run_against_the_stand_in(fake_trt, tmp_path):
    """bench/trt_e2e_models.py: a record per model and precision (distinct names, so the reload
    jobs do not collide), rows like the fixtures', a missing export a row with its error."""
    from bench import trt_e2e_models as models

    import shutil

    shutil.copy(fixture_path("vit_legacy_op13_fp32.onnx"), tmp_path / "vit.onnx")
    rec = models.record("bert384", "fp16", tmp_path)
    assert rec["file"] == "bert384_fp16.onnx" and rec["path"].endswith("bert.onnx")
    assert e2e.profile_spec(rec) == [{"batch": (1, 8, 8), "seq": (16, 384, 384)}]
    lib = next(Path(np.__file__).parent.rglob("_multiarray_umath*.so"))
    out = tmp_path / "m.json"
    rc = models.main(["--plugins", str(lib), "--out", str(out), "--models", "vit,gpt2", "--precisions", "fp32",
                      "--models-dir", str(tmp_path), "--reload-limit-s", "60"])  # fmt: skip
    vit, gpt2 = json.loads(out.read_text())["rows"]
    assert rc == 1 and vit["model"] == "vit_fp32.onnx" and vit["built"] and vit["plugin_layers_match"]
    assert vit["fused_nodes"] == {"FusedFC": 13, "FusedLayerNorm": 5}
    assert "no export at" in gpt2["error"] and not gpt2["pass"]
    with pytest.raises(SystemExit):
        models.parse_args(["--plugins", "x", "--out", "y", "--models", "resnet"])


def test_rows_verify_on_masks_that_keep_their_first_token():
    """A fully masked attention row is no real input (TensorRT 8.5's fp32 engines give NaN there,
    fused or not): the rows' feeds keep each row's first token and change nothing else."""
    from bench.trt_verify import _corner_feeds, corner_inputs, keep_first_token

    rec = next(r for r in load_manifest() if r["file"] == "bert_legacy_op13_fp32.onnx")
    raw, kept = _corner_feeds(rec), corner_inputs(rec)
    assert any((f["attention_mask"][:, 0] == 0).any() for f in raw)  # the seed does mask some first tokens
    for a, b in zip(raw, kept):
        assert (b["attention_mask"][:, 0] == 1).all()
        np.testing.assert_array_equal(a["attention_mask"][:, 1:], b["attention_mask"][:, 1:])
        np.testing.assert_array_equal(a["input_ids"], b["input_ids"])
    pixels = {"pixel_values": np.zeros((1, 3, 4, 4), np.float32)}
    assert keep_first_token(pixels) is pixels
