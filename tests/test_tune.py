"""fusion.tune's search on the CPU: engine building and timing replaced by deterministic fake
latencies computed from what the candidate model contains."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import onnx
import pytest

import fusion
from fusion.cli import commands as cli
from fusion.passes import text as report
from fusion import tuning
from fusion.passes import defaults
from fusion.errors import FusionError
from fusion.trt.timing import Timing

REPO = Path(__file__).resolve().parent.parent
BERT_TINY = str(REPO / "fusion/examples/bert_tiny.onnx")  # 5 LayerNorms, 11 plain FCs, 2 FCs + GELU
PROFILE = {"batch": (1, 2, 4), "seq": (1, 8, 16)}
SHAPE_SCALE = {"min": 0.2, "opt": 1.0, "max": 2.0}


def _timing(ms: float) -> Timing:
    return Timing(ms, ms * 0.99, ms * 1.01, ms * 0.98, ms * 1.02, 10, 5, "execute_async_v2")


def ops_of(model: onnx.ModelProto) -> Counter:
    out: Counter = Counter()
    for n in model.graph.node:
        act = next((a.s.decode() for a in n.attribute if a.name == "activation"), "")
        out[n.op_type + (f"[{act}]" if act else "")] += 1
    return out


# Per fused node, in ms added to a 10 ms engine: LayerNorm plugins win, FCs with their
# activation fused win, plain FCs lose (TensorRT's own MatMul + bias is faster).
COST = {"FusedLayerNorm": -0.2, "FusedFC[gelu_erf]": -0.3, "FusedFC[none]": +0.1}


class FakeBench:
    instances: list = []

    def __init__(self, original, *, profiles, **options):
        self.original, self.options, self.built = original, options, []
        FakeBench.instances.append(self)

    def labels(self):
        return ["min", "opt", "max"]

    def _ms(self, model) -> list[float]:
        ops = ops_of(model)
        ms = 10.0 + sum(COST.get(op, 0.0) * n for op, n in ops.items())
        return [ms * SHAPE_SCALE[s] for s in self.labels()]

    def baseline(self):
        self.built.append("unfused")
        return 60.0, [_timing(ms) for ms in self._ms(self.original)]

    def measure(self, model, name):
        self.built.append(name)
        if getattr(self, "fail", None) == name:
            raise fusion.FusionError("TensorRT could not build the engine: no implementation")
        return 50.0, [_timing(ms) for ms in self._ms(self.original)], [_timing(ms) for ms in self._ms(model)]


@pytest.fixture
def fake_bench(monkeypatch):
    FakeBench.instances = []
    monkeypatch.setattr(tuning, "EngineBench", FakeBench)
    return FakeBench


def test_tune_keeps_what_wins_and_drops_what_loses_with_the_reason(fake_bench):
    fused, record = fusion.tune(BERT_TINY, target="plugin", profile=PROFILE)
    by_name = {m.name: m for m in record.measurements}
    # every build, in order: baseline, each pass alone, gemm's groups, the winners together
    assert fake_bench.instances[0].built == ["unfused", "skipnorm", "layernorm", "gemm", "gemm[act]", "gemm[plain]",
                                             "layernorm+gemm[act]"]
    assert by_name["rmsnorm"].decision == "skipped" and by_name["rmsnorm"].reason == "nothing to fuse"
    # (a skip norm costs nothing here: no faster, so dropped)
    skip = by_name["skipnorm"]
    assert skip.decision == "dropped" and skip.reason == "within the noise margin (1.000x, need >= 1.03x)"
    assert by_name["layernorm"].decision == "kept" and by_name["layernorm"].score == pytest.approx(10 / 9)
    gemm = by_name["gemm"]
    assert gemm.decision == "dropped" and gemm.reason == "slower (geomean 0.952x, worst shape 0.952x)"
    assert by_name["gemm[plain]"].decision == "dropped" and by_name["gemm[act]"].decision == "kept"
    final = by_name["layernorm+gemm[act]"]
    assert final.decision == "final" and final.speedups == pytest.approx([10 / 8.4] * 3)
    assert record.kept == ["layernorm", "gemm[act]"]
    assert ops_of(fused)["FusedLayerNorm"] == 5 and ops_of(fused)["FusedFC[gelu_erf]"] == 2
    assert "FusedFC[none]" not in ops_of(fused)
    # the plain FCs left out are near-misses quoting what they measured
    result = tuning.tune(BERT_TINY, target="plugin", profile=PROFILE).result
    tuned = [m.reason for m in result.near_misses if m.reason.startswith("left unfused by tuning")]
    assert set(tuned) == {"left unfused by tuning: gemm[plain] alone measured 0.901x at min, 0.901x at opt, 0.901x at max"}
    assert len(tuned) == 11
    assert result.tuning.kept == ["layernorm", "gemm[act]"]


def test_tune_fc_slower_ln_faster_without_groups(fake_bench, monkeypatch):
    monkeypatch.setitem(COST, "FusedFC[gelu_erf]", +0.1)  # every FC loses now
    res = fusion.tune(BERT_TINY, target="plugin", profile=PROFILE, groups=False)
    by_name = {m.name: m for m in res.record.measurements}
    assert by_name["gemm"].decision == "dropped" and "slower" in by_name["gemm"].reason
    assert by_name["layernorm"].decision == "final" and res.record.kept == ["layernorm"]
    assert fake_bench.instances[0].built == ["unfused", "skipnorm", "layernorm", "gemm"]  # one winner: no combination build
    assert "FusedFC" not in {n.op_type for n in res.model.graph.node}
    miss = {m.reason for m in res.result.near_misses if m.reason.startswith("left unfused")}
    assert miss == {"left unfused by tuning: gemm alone measured 0.885x at min, 0.885x at opt, 0.885x at max"}


def test_tune_noise_margin_and_nothing_kept(fake_bench, monkeypatch):
    monkeypatch.setattr(tuning, "MARGIN", 0.03)
    monkeypatch.setitem(COST, "FusedLayerNorm", -0.02)  # 1 % faster: noise
    monkeypatch.setitem(COST, "FusedFC[gelu_erf]", +0.1)
    res = fusion.tune(BERT_TINY, target="plugin", profile=PROFILE)
    ln = next(m for m in res.record.measurements if m.name == "layernorm")
    assert ln.decision == "dropped" and ln.reason == "within the noise margin (1.010x, need >= 1.03x)"
    assert res.record.kept == [] and ops_of(res.model) == ops_of(onnx.load(BERT_TINY))
    assert "tuning kept nothing" in res.result.warnings[0]


def test_tune_combination_that_loses_falls_back_to_the_best_unit(fake_bench, monkeypatch):
    real = FakeBench._ms

    def ms(self, model):  # the two winners interfere: together they are slow
        ops = ops_of(model)
        out = real(self, model)
        return [v + 3.0 if ops["FusedLayerNorm"] and ops["FusedFC[gelu_erf]"] else v for v in out]

    monkeypatch.setattr(FakeBench, "_ms", ms)
    res = fusion.tune(BERT_TINY, target="plugin", profile=PROFILE)
    by_name = {m.name: m for m in res.record.measurements}
    assert by_name["layernorm+gemm[act]"].decision == "not chosen"
    assert "not faster than layernorm alone" in by_name["layernorm+gemm[act]"].reason
    assert by_name["layernorm"].decision == "final" and res.record.kept == ["layernorm"]


def test_tune_failed_build_is_recorded_and_dropped(fake_bench, monkeypatch):
    monkeypatch.setattr(FakeBench, "fail", "gemm", raising=False)
    res = fusion.tune(BERT_TINY, target="plugin", profile=PROFILE)
    gemm = next(m for m in res.record.measurements if m.name == "gemm")
    assert gemm.decision == "failed" and "could not build the engine" in gemm.reason
    assert "gemm[act]" in res.record.kept  # its groups are still tried


def test_tune_record_in_text_and_json(fake_bench):
    res = fusion.tune(BERT_TINY, target="plugin", profile=PROFILE)
    d = json.loads(report.to_json(res.result))["tuning"]
    assert d["kept"] == ["layernorm", "gemm[act]"] and d["engine_builds"] == 7 and d["build_s"] == 60 + 6 * 50
    # One "skipped" row per pass with nothing to fuse in BERT-tiny (rmsnorm, groupnorm), then the
    # builds: baseline, skipnorm, layernorm, gemm, its two groups, the winners together.
    assert [m["decision"] for m in d["measurements"]] == ["skipped", "skipped", "baseline", "dropped", "kept", "dropped",
                                                          "kept", "dropped", "final"]  # fmt: skip
    text = report.text(res.result)
    assert "tuning (plugin, fp32, margin 3%): kept layernorm, gemm[act]; 7 engine builds" in text
    assert "gemm[plain]" in text and "slower (geomean 0.901x, worst shape 0.901x)" in text


def test_tune_leaves_unverified_kernels_untried_unless_named(fake_bench, monkeypatch):
    """Tuning times engines, it does not check their results: a pass off by default because its
    kernels have not run on a GPU (defaults.UNVERIFIED) is not tried unless named.  No pass is
    unverified now, so skipnorm on the plugin target stands in for one."""
    res = fusion.tune(BERT_TINY, target="plugin", profile=PROFILE)
    rows = {m.name: m for m in res.result.tuning.measurements}
    assert rows["skipnorm"].decision == "dropped" and rows["skipnorm"].speedups  # tried: built and timed
    unverified = frozenset({("plugin", "skipnorm")})
    monkeypatch.setattr(defaults, "UNVERIFIED", unverified)
    monkeypatch.setattr(tuning, "UNVERIFIED", unverified)  # (tuning imported the name)
    res = fusion.tune(BERT_TINY, target="plugin", profile=PROFILE)
    rows = {m.name: m for m in res.result.tuning.measurements}
    assert rows["skipnorm"].decision == "skipped" and "not tried: off by default for target plugin" in rows["skipnorm"].reason
    assert rows["groupnorm"].reason == "nothing to fuse"  # only what is listed stays untried
    assert "skiplayernorm" not in res.result.counts()
    named = fusion.tune(BERT_TINY, target="plugin", profile=PROFILE, passes=["skipnorm", "layernorm"])
    rows = {m.name: m for m in named.result.tuning.measurements}
    assert rows["skipnorm"].decision == "dropped" and rows["skipnorm"].speedups  # named, it is tried


def test_tune_bad_arguments():
    with pytest.raises(FusionError, match="target must be one of trt, plugin, not 'onnx'"):
        fusion.tune(BERT_TINY, target="onnx", profile=PROFILE)
    with pytest.raises(FusionError, match="tuning needs the shapes"):
        fusion.tune(BERT_TINY, target="trt")


def test_cli_fuse_tune(fake_bench, tmp_path, capsys):
    out = tmp_path / "tuned.onnx"
    rc = cli.main(["fuse", BERT_TINY, "-o", str(out), "--tune", "--target", "plugin", "--profile", "batch=1,2,4",
                   "seq=1,8,16", "--tactic-sources", "CUBLAS,CUBLAS_LT", "--json"])  # fmt: skip
    assert rc == 0 and out.exists()
    info = json.loads(capsys.readouterr().out)
    assert info["tuning"]["kept"] == ["layernorm", "gemm[act]"] and info["counts"] == {"gemm": 2, "layernorm": 5}
    assert fake_bench.instances[0].options["tactic_sources"] == ["CUBLAS", "CUBLAS_LT"]
    assert cli.main(["fuse", BERT_TINY, "-o", str(out), "--tune", "--target", "plugin"]) == 2
    assert "needs --profile" in capsys.readouterr().err
    assert cli.main(["fuse", BERT_TINY, "-o", str(out), "--tune", "--target", "onnx", "--profile", "batch=1", "seq=4"]) == 2
    assert "target must be one of trt, plugin, not 'onnx'" in capsys.readouterr().err
