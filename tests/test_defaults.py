"""Target defaults chosen by measurement (fusion/passes/defaults.py): the trt target leaves FC and
LayerNorm fusion out unless the pass is named, and the plugin target every pass but GroupNorm (our
other plugins made whole TensorRT 8.5 engines slower), each saying why."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

import fusion
from fusion.cli import commands as cli
from fusion.passes import defaults, driver

from . import groupnorm_models as gm, skip_models as sm
from .builders import NORM_FC_CLI, NORM_FC_PASSES

REPO = Path(__file__).resolve().parent.parent
BERT_TINY = str(REPO / "fusion/examples/bert_tiny.onnx")  # 5 LayerNorms, 13 FCs
LLAMA_TINY = str(REPO / "fusion/examples/llama_tiny.onnx")
ALL_PASSES = ["skipnorm", "layernorm", "rmsnorm", "gemm", "groupnorm"]


def _ops(model) -> set[str]:
    return {n.op_type for n in model.graph.node}


def test_trt_target_leaves_fc_out_by_default_with_the_measurement():
    result = fusion.run(BERT_TINY, target="trt")
    assert result.counts().get("gemm", 0) == 0 and "CustomFCPluginDynamic" not in _ops(result.model)
    off = [m for m in result.near_misses if m.reason.startswith("off by default for target trt") and m.rule == "gemm"]
    assert len(off) == 13
    assert "BERT-base 0.76x, ViT-base 0.44x" in off[0].reason and "passes=[..., 'gemm']" in off[0].reason


def test_naming_the_pass_opts_in():
    assert fusion.run(BERT_TINY, ["gemm"], target="trt").counts() == {"gemm": 13}
    fused = fusion.fuse_gemm(BERT_TINY, target="trt")
    assert "CustomFCPluginDynamic" in _ops(fused)


def test_default_passes_per_target():
    assert defaults.default_passes("plugin", ALL_PASSES) == ["groupnorm"]
    assert defaults.default_passes("trt", ALL_PASSES) == ["rmsnorm"]
    assert defaults.default_passes("onnx", ALL_PASSES) == ["layernorm", "rmsnorm", "gemm", "groupnorm"]


def _off(result, rule: str) -> list[str]:
    off = "off by default for target plugin"
    return [m.reason for m in result.near_misses if m.rule == rule and m.reason.startswith(off)]


def _opt_in(reason: str, pass_name: str) -> bool:
    return f"name the pass to fuse it (passes=[..., {pass_name!r}] / --passes ...,{pass_name})" in reason


def test_plugin_target_fuses_nothing_by_default_with_the_measurement():
    """Our plugins split the one region TensorRT 8.5 compiles an unfused transformer into."""
    result = fusion.run(BERT_TINY, target="plugin")
    assert result.counts() == {} and not result.modified
    assert not _ops(result.model) & {"FusedLayerNorm", "FusedFC"}
    ln, fc = _off(result, "layernorm"), _off(result, "gemm")
    assert len(ln) == 5 and len(fc) == 13
    assert "BERT-base fp32 0.93x, fp16 0.72x" in ln[0] and _opt_in(ln[0], "layernorm")
    assert "BERT-base fp32 with LayerNorm 0.85x" in fc[0] and _opt_in(fc[0], "gemm")
    llama = fusion.run(LLAMA_TINY, target="plugin")
    rms = _off(llama, "rmsnorm")
    # Five: four of them would fuse by a shorter match than the longest, whose reason (a Cast read
    # outside) would otherwise hide that naming the pass fuses them.
    assert llama.counts() == {} and len(rms) == 5 and "0.71x" in rms[0] and _opt_in(rms[0], "rmsnorm")
    assert [m.rule for m in llama.near_misses if not m.reason.startswith("off by default")] == ["gemm"] * 4  # Q·Kᵀ, P·V


def test_plugin_target_leaves_skip_norms_out_and_fuses_group_norms_by_default():
    skip = sm.build(sm.Skip())
    result = fusion.run(skip, target="plugin")
    # The skip norm's miss gives way to the plain norm's at the same root (skipnorm defers its misses).
    assert result.counts() == {} and len(_off(result, "layernorm")) == 1
    wrapped = [r for r in defaults.rules_for(None, "plugin") if r.pass_name == "skipnorm"]
    alone = driver.run(skip, wrapped, "plugin")
    (why,) = _off(alone, "skiplayernorm")
    assert "BERT-base fp32 0.93x, fp16 0.73x" in why and _opt_in(why, "skipnorm")
    assert fusion.run(skip, ["skipnorm"]).counts() == {"skiplayernorm": 1}
    # FusedGroupNorm made a UNet's engine faster (1.12x fp32, 1.44x fp16): on without naming it.
    gn = gm.build(gm.GN())
    result = fusion.run(gn, target="plugin")
    assert result.counts() == {"groupnorm": 1} and not _off(result, "groupnorm")
    assert "FusedGroupNorm" in _ops(result.model)
    assert defaults.off_reason("trt", "groupnorm") and "cuDNN" in defaults.off_reason("trt", "groupnorm")


def test_naming_the_plugin_passes_opts_in():
    named = fusion.run(BERT_TINY, NORM_FC_PASSES)
    assert named.counts() == {"gemm": 13, "layernorm": 5}
    assert not any(m.reason.startswith("off by default") for m in named.near_misses)
    assert _ops(fusion.fuse_layernorm(BERT_TINY)) >= {"FusedLayerNorm"}  # the helpers name their passes
    assert "FusedFC" in _ops(fusion.fuse_gemm(BERT_TINY))
    assert fusion.run(LLAMA_TINY, ["rmsnorm"]).counts() == {"rmsnorm": 5}


def test_cli_fuse_plugin_default_writes_the_model_unfused(tmp_path, capsys):
    """Nothing fused is not an error: exit 0, the output is the input, the near-misses say why."""
    out = tmp_path / "f.onnx"
    assert cli.main(["fuse", BERT_TINY, "-o", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["counts"] == {} and info["modified"] is False
    assert sum(m["reason"].startswith("off by default for target plugin") for m in info["near_misses"]) == 18
    assert [n.op_type for n in onnx.load(str(out)).graph.node] == [n.op_type for n in onnx.load(BERT_TINY).graph.node]
    assert cli.main(["fuse", BERT_TINY, "-o", str(out), *NORM_FC_CLI, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["counts"] == {"gemm": 13, "layernorm": 5}


def test_trt_target_leaves_layernorm_out_by_default_with_the_measurement():
    """TensorRT 8.5's LayerNorm plugin lost to its own handling of the chain (BERT-base 0.88x)."""
    result = fusion.run(BERT_TINY, target="trt")
    assert result.counts().get("layernorm", 0) == 0 and "LayerNorm" not in _ops(result.model)
    off = [m for m in result.near_misses if m.rule == "layernorm" and m.reason.startswith("off by default")]
    assert len(off) == 5 and "BERT-base 0.88x" in off[0].reason
    named = fusion.run(BERT_TINY, ["layernorm"], target="trt")  # opted in: its own reasons only
    assert not any(m.reason.startswith("off by default") for m in named.near_misses)


def test_default_trt_fusion_still_computes_the_same():
    """Numerically: the FCs left alone, the model runs as before on onnxruntime."""
    result = fusion.run(BERT_TINY, target="trt")
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    feed = {"input_ids": np.random.default_rng(0).integers(0, 50, (2, 8)).astype(np.int64),
            "attention_mask": np.ones((2, 8), np.int64)}  # fmt: skip
    a = ort.InferenceSession(BERT_TINY, so, providers=["CPUExecutionProvider"]).run(None, feed)
    b = ort.InferenceSession(result.model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feed)
    assert all(np.allclose(x, y, atol=1e-5) for x, y in zip(a, b))


def test_cli_fuse_trt_default_and_opt_in(tmp_path, capsys):
    out = tmp_path / "f.onnx"
    assert cli.main(["fuse", BERT_TINY, "-o", str(out), "--target", "trt", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert "gemm" not in info["counts"] and any("off by default" in m["reason"] for m in info["near_misses"])
    assert cli.main(["fuse", BERT_TINY, "-o", str(out), "--target", "trt", "--passes", "layernorm,gemm", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["counts"]["gemm"] == 13
