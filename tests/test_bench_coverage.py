"""The coverage benchmark's skip-norm section (bench/skip_coverage.py): its ground truth
(``residual_norm_sites`` from the source model), the structural check of a fused node against
the original graph, the scoring, and the committed results."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

import fusion
from bench import skip_coverage as sc
from tests.fixtures.catalog import fixture_path, load_manifest

from .test_skipnorm_fixtures import RECORDS as SKIP_RECORDS
from .test_skipnorm_fixtures import expected_skips

torch = pytest.importorskip("torch")
mf = pytest.importorskip("tests.fixtures.make_fixtures")

REPO = Path(__file__).resolve().parents[1]
EXPORTERS = REPO / "tests" / "fixtures" / "exporters" / "manifest.json"
BERT = "bert_legacy_op13_fp32.onnx"


class _Block(torch.nn.Module):
    def __init__(self, how: str) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.how = how
        self.fc = torch.nn.Linear(8, 8)
        self.pos = torch.nn.Parameter(torch.randn(1, 4, 8))
        self.ln = torch.nn.LayerNorm(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.how == "residual":
            return self.ln(x + self.fc(x))
        if self.how == "broadcast":
            return self.ln(x + self.pos)
        if self.how == "clamped":
            return self.ln(torch.clamp(x + self.fc(x), -10, 10))
        return self.ln(self.fc(x))  # "plain"


@pytest.mark.parametrize(
    ("how", "site"),
    [("residual", "residual_norm_sites"), ("broadcast", "residual_norm_broadcast_sites"), ("clamped", None),
     ("plain", None)],
)
def test_residual_norm_sites_from_the_torch_model(how, site):
    sites = mf.residual_norm_sites(_Block(how).eval(), (torch.randn(2, 4, 8),))
    assert sites == {k: int(k == site) for k in sites}, sites


def test_a_channels_first_norm_after_a_residual_is_its_own_kind():
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(4, 4, 1)
            self.ln = mf.LegacyConvNextLayerNorm(4, data_format="channels_first")

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.ln(x + self.conv(x))

    sites = mf.residual_norm_sites(Net().eval(), (torch.randn(1, 4, 3, 3),))
    assert sites == {"residual_norm_sites": 0, "residual_norm_broadcast_sites": 0,
                     "residual_norm_channels_first_sites": 1}


def test_manifest_sites_agree_with_the_skipnorm_fixture_test():
    """Two derivations of one number: the torch run (manifest) and test_skipnorm_fixtures'."""
    for rec in SKIP_RECORDS:
        assert rec["residual_norm_sites"] == expected_skips(rec), rec["file"]
    assert all("residual_norm_sites" in r for r in load_manifest())
    exporters = {r["family"]: r["residual_norm_sites"] for r in json.loads(EXPORTERS.read_text())}
    assert exporters.pop("keras_bert") == 4 and not any(exporters.values()), exporters


def test_our_fused_nodes_are_the_graphs_residual_norm_sites():
    path = fixture_path(BERT)
    original = onnx.load(str(path))
    sites = sc.Sites(original)
    assert len(sites.sites) == 5  # 4 residual sites and the embeddings' broadcasting Add
    fused = fusion.run(str(path), ["skipnorm", "layernorm", "rmsnorm"]).model
    nodes = [n for n in fused.graph.node if n.op_type in sc.OURS_SKIP_OPS]
    assert len(nodes) == 4 and all(sites.matches(n, fused) for n in nodes)


def test_a_fused_node_elsewhere_is_not_a_site():
    path = fixture_path(BERT)
    sites = sc.Sites(onnx.load(str(path)))
    fused = fusion.run(str(path), ["skipnorm", "layernorm", "rmsnorm"]).model
    first, second = [n for n in fused.graph.node if n.op_type in sc.OURS_SKIP_OPS][:2]
    moved = onnx.helper.make_node(first.op_type, list(first.input), [second.output[0]], domain=first.domain)
    assert not sites.matches(moved, fused)  # one site's sum into another site's norm output
    stray = [n.output[0] for n in fused.graph.node if n.op_type == "MatMul"][:2]
    unrelated = onnx.helper.make_node(first.op_type, stray, [first.output[0]], domain=first.domain)
    assert not sites.matches(unrelated, fused)


def test_hits_beyond_the_ground_truth_and_misses_are_false_positives():
    row: dict = {}
    sc._score(row, "ours", [True] * 5, 4)
    assert (row["skip_ours"], row["skip_ours_false_positives"]) == (4, 1)
    sc._score(row, "ours", [True, False], 4)
    assert (row["skip_ours"], row["skip_ours_false_positives"]) == (1, 1)


def test_skip_row_on_a_fixture_verifies_ours():
    rec = next(r for r in load_manifest() if r["file"] == "llama_legacy_op17_fp32.onnx")
    row = sc.skip_row(rec, fixture_path(rec["file"]))
    assert row["skip_expected"] == row["skip_ours"] == 4
    assert row["skip_ours_false_positives"] == 0 and row["skip_ours_verified"] is True
    assert row["skip_onnxruntime"] + row["skip_onnxruntime_false_positives"] <= 4 + 1


def test_committed_results_add_up_and_the_readme_quotes_them():
    data = json.loads((REPO / "bench" / "results" / "coverage.json").read_text())
    skip, rows = data["summary"]["skip"], [r for r in data["rows"] if r.get("skip_expected") is not None]
    for key, field in (("expected", "skip_expected"), ("ours", "skip_ours"), ("onnxruntime", "skip_onnxruntime"),
                       ("ours_false_positives", "skip_ours_false_positives"),
                       ("onnxruntime_false_positives", "skip_onnxruntime_false_positives")):
        assert skip[key] == sum(r[field] for r in rows), key
    assert skip["ours_verified"] == skip["ours_checked"] == sum("skip_ours_verified" in r for r in rows)
    readme = (REPO / "README.md").read_text().splitlines()
    others = {r["file"] for r in json.loads(EXPORTERS.read_text())}
    for start, torch_rows in (("| fusion recall on real exports", True), ("| recall on other exporters", False)):
        line = next(x for x in readme if x.startswith(start))
        sub = [r for r in rows if (r["model"] in others) != torch_rows]
        expected = sum(r["skip_expected"] for r in sub)
        for tool in ("ours", "onnxruntime"):
            assert f"{sum(r[f'skip_{tool}'] for r in sub)}/{expected}" in line, (start, tool)


def test_keras_layernorm_sites_are_seen_and_our_skip_nodes_match_them():
    """TensorFlow's LayerNorm (x·s + ((−mean)·s + β)) is a site of the walk: without it each fused
    Keras skip node would count as a false positive.  The embeddings' LayerNorm is no site."""
    path = EXPORTERS.parent / "keras_bert_tf2onnx_op13.onnx"
    sites = sc.Sites(onnx.load(str(path)))
    assert len(sites.sites) == 4 and len(sc.tf_layernorms(sites.gv)) == 5
    fused = fusion.run(str(path), ["skipnorm", "layernorm", "rmsnorm"]).model
    nodes = [n for n in fused.graph.node if n.op_type in sc.OURS_SKIP_OPS]
    assert len(nodes) == 4 and all(sites.matches(n, fused) for n in nodes)
