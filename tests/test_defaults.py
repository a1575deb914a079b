"""Target defaults chosen by measurement (fusion/passes/defaults.py): the trt target leaves FC and
LayerNorm fusion out unless the pass is named, saying why."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort

import fusion
from fusion.cli import commands as cli
from fusion.passes import defaults

REPO = Path(__file__).resolve().parent.parent
BERT_TINY = str(REPO / "fusion/examples/bert_tiny.onnx")


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


def test_other_targets_keep_every_pass():
    assert fusion.run(BERT_TINY, target="plugin").counts() == {"gemm": 13, "layernorm": 5}
    assert defaults.default_passes("plugin", ["layernorm", "gemm"]) == ["layernorm", "gemm"]
    assert defaults.default_passes("trt", ["layernorm", "rmsnorm", "gemm"]) == ["rmsnorm"]


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
