"""The HTML report: one section per fusion with pictures, self-contained, verify table present."""

from __future__ import annotations

import importlib
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import onnx
import pytest

import fusion
from fusion.cli import commands as cli
from fusion.report import html as html_report
from fusion.report.svg import Box, layered_svg

from .builders import FLOAT, NORM_FC_CLI, NORM_FC_PASSES
from .norm_models import LAYER, build
from .test_scopes import _if_model

EXAMPLES = Path(__file__).resolve().parent.parent / "fusion" / "examples"


def sections(text: str) -> list[str]:
    return re.findall(r'<section class="fusion" id="fusion-\d+">.*?</section>', text, re.DOTALL)


def assert_self_contained(text: str) -> None:
    assert "<script" not in text.lower()
    assert "<link" not in text.lower()
    assert not re.search(r"https?://|//[a-z0-9.-]+\.[a-z]{2,}/", text, re.IGNORECASE), "external URL in the report"
    assert not re.search(r'(?:src|href)\s*=\s*["\'](?!#)', text), "a link or resource that is not an in-page anchor"
    assert "@import" not in text and "url(" not in text.replace("url(#", "")


def svgs_parse(text: str) -> int:
    found = re.findall(r"<svg .*?</svg>", text, re.DOTALL)
    for s in found:
        ET.fromstring(s)  # well-formed XML, so every browser draws it
    return len(found)


@pytest.fixture(scope="module")
def bert_report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    src, dst, out = EXAMPLES / "bert_tiny.onnx", tmp / "fused.onnx", tmp / "report.html"
    result = fusion.fuse_file(src, dst, NORM_FC_PASSES)
    html_report.write_report(src, dst, result, out)
    return result, out.read_text(encoding="utf-8")


def test_one_section_per_fusion_with_before_and_after_pictures(bert_report):
    result, text = bert_report
    secs = sections(text)
    assert len(secs) == len(result.fusions) == 18
    for f, sec in zip(result.fusions, secs):
        assert sec.count("<svg") == 2, "a picture before and after"
        assert f.root in sec
        for n in f.nodes:
            if n["op_type"] != "Constant":
                assert f">{n['op_type']}<" in sec  # the emitted node, drawn and in its table
                for attr in n["attributes"]:
                    assert f"@{attr}" in sec
    ln = next(sec for f, sec in zip(result.fusions, secs) if f.rule == "layernorm")
    for op in ("ReduceMean", "Sub", "Pow", "Sqrt", "Div"):
        assert f">{op}<" in ln  # the matched chain is drawn
    assert svgs_parse(text) == 2 * len(result.fusions)


def test_report_is_self_contained(bert_report):
    assert_self_contained(bert_report[1])


def test_verify_table_and_near_misses(bert_report):
    result, text = bert_report
    verify = text.split('<section id="verify">', 1)[1].split("</section>", 1)[0]
    assert "<table" in verify and "PASSED" in verify
    # header + 2 outputs at 3 random shapes, then at the same 3 on the optimized session
    assert verify.count("<tr>") == 1 + 3 * 2 * 2
    assert verify.count("<td>onnxruntime optimized</td>") == 3 * 2
    misses = text.split('<section id="near-misses">', 1)[1]
    assert len(result.near_misses) == 4
    for m in result.near_misses:
        assert m.node in misses


def test_cli_report_and_dry_run(tmp_path, capsys):
    src = str(EXAMPLES / "llama_tiny.onnx")
    assert cli.main(["fuse", src, "-o", str(tmp_path / "f.onnx"), *NORM_FC_CLI, "--report", str(tmp_path / "r.html")]) == 0
    text = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert len(sections(text)) == 19 and "FusedRMSNorm" in text and "PASSED" in text
    assert cli.main(["fuse", src, "--dry-run", *NORM_FC_CLI, "--report", str(tmp_path / "d.html")]) == 0
    dry = (tmp_path / "d.html").read_text(encoding="utf-8")
    assert len(sections(dry)) == 19
    assert "Not run: dry run" in dry
    capsys.readouterr()


def test_verify_failure_is_reported_not_raised(tmp_path, monkeypatch):
    src, dst = EXAMPLES / "bert_tiny.onnx", tmp_path / "fused.onnx"
    result = fusion.fuse_file(src, dst, NORM_FC_PASSES)

    def broken(*args, **kwargs):
        raise RuntimeError("no runtime here")

    monkeypatch.setattr(importlib.import_module("fusion.compare.verify"), "verify", broken)
    text = html_report.render_report(src, dst, result)
    assert "verification could not run: RuntimeError: no runtime here" in text
    assert len(sections(text)) == len(result.fusions)


def test_unnamed_nodes_are_found_by_walking_back(tmp_path):
    model = build(LAYER.with_(shape=("B", 16)))
    for n in model.graph.node:
        n.name = ""
    src, dst = tmp_path / "m.onnx", tmp_path / "f.onnx"
    onnx.save(model, src)
    result = fusion.fuse_file(src, dst, NORM_FC_PASSES)
    assert result.counts() == {"layernorm": 1}
    text = html_report.render_report(src, dst, result)
    (sec,) = sections(text)
    for op in ("ReduceMean", "Sub", "Sqrt", "Div"):
        assert f">{op}<" in sec


def test_subgraph_scope_is_drawn(tmp_path):
    src, dst = tmp_path / "m.onnx", tmp_path / "f.onnx"
    onnx.save(_if_model(), src)
    result = fusion.fuse_file(src, dst, ["layernorm"])
    text = html_report.render_report(src, dst, result)
    (sec,) = sections(text)
    assert "main/If_0.then_branch" in sec and ">ReduceMean<" in sec
    assert_self_contained(text)


def test_nothing_fused(tmp_path):
    g = onnx.helper.make_graph(
        [onnx.helper.make_node("Relu", ["x"], ["y"], name="relu")],
        "g",
        [onnx.helper.make_tensor_value_info("x", FLOAT, [2])],
        [onnx.helper.make_tensor_value_info("y", FLOAT, [2])],
    )
    src, dst = tmp_path / "m.onnx", tmp_path / "f.onnx"
    onnx.save(onnx.helper.make_model(g, opset_imports=[onnx.helper.make_opsetid("", 13)]), src)
    result = fusion.fuse_file(src, dst, NORM_FC_PASSES)
    text = html_report.render_report(src, dst, result)
    assert "Nothing fused." in text and not sections(text)


def test_layout_keeps_boxes_apart():
    boxes = [Box("x", "x", kind="input")] + [Box(f"n{i}", f"Op{i}", "detail, more") for i in range(6)]
    boxes.append(Box("y", "y", kind="output"))
    edges = [("x", "n0"), ("x", "n1"), ("x", "n2"), ("n0", "n3"), ("n1", "n3"), ("n2", "n4"), ("n3", "n5"),
             ("n4", "n5"), ("x", "n5"), ("n5", "y")]  # fmt: skip
    svg = layered_svg(boxes, edges, uid="t")
    root = ET.fromstring(svg)
    rects = [(float(r.get("x")), float(r.get("y")), float(r.get("width")), float(r.get("height")))
             for r in root.iter("rect")]  # fmt: skip
    assert len(rects) == len(boxes)
    for i, a in enumerate(rects):
        for b in rects[i + 1:]:
            apart = a[0] + a[2] <= b[0] or b[0] + b[2] <= a[0] or a[1] + a[3] <= b[1] or b[1] + b[3] <= a[1]
            assert apart, f"boxes overlap: {a} {b}"
    assert float(root.get("width")) < 800


def test_moved_reshape_and_casts(tmp_path):
    """GPT-2 in fp16: LayerNorms with Casts inside, FC + tanh-GELU read through a Reshape."""
    src = Path(__file__).resolve().parent / "fixtures" / "models" / "gpt2_legacy_op13_fp16.onnx"
    dst = tmp_path / "f.onnx"
    result = fusion.fuse_file(src, dst, NORM_FC_PASSES)
    text = html_report.render_report(src, dst, result)
    secs = sections(text)
    assert len(secs) == len(result.fusions)
    gelu = next(s for s in secs if "activation=gelu_tanh" in s)
    assert ">Tanh<" in gelu and ">Reshape<" in gelu
    assert ">Cast<" in next(s for f, s in zip(result.fusions, secs) if f.rule == "layernorm")
    assert "new constant" not in text  # every input of an emitted node is either computed or a known constant
