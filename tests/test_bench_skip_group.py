"""bench/bench_skip_group.py without a GPU: the grid (x >= 64 MiB), the byte accounting, the
rows and their goals, the arguments, and whole runs on the CPU with stand-in kernels that
read and write through the raw pointers the benchmark passes."""

from __future__ import annotations

import contextlib
import ctypes
import json
import math
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F  # noqa: N812

from bench import bench_skip_group as bsg
from fusion.plugins.library import _DTYPE_TAG, GROUPNORM_DTYPES

REPO = Path(__file__).resolve().parents[1]
MIB = 1 << 20
TDT = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


# -- the grid ---------------------------------------------------------------------------------


def test_skip_grid_has_every_x_at_64_mib_with_the_fewest_power_of_two_rows():
    cases = bsg.skip_cases()
    assert len(cases) == 2 * 3 * 3 * 2
    assert {(c.op, c.dtype, c.cols, c.sum_out) for c in cases} == {
        (o, d, w, s) for o in ("layernorm", "rmsnorm") for d in ("float32", "float16", "bfloat16")
        for w in (768, 1024, 4096) for s in (False, True)}  # fmt: skip
    for c in cases:
        assert 64 * MIB <= c.x_bytes < 128 * MIB, c
        assert c.rows & (c.rows - 1) == 0, c
    rows = {(c.dtype, c.cols): c.rows for c in cases}
    assert rows[("float16", 768)] == 65536 and rows[("float32", 768)] == 32768  # 96 MiB each
    assert rows[("float16", 1024)] == 32768 and rows[("float32", 4096)] == 4096  # exactly 64 MiB


def test_group_grid_is_the_unet_batch_and_a_batch_with_x_at_64_mib():
    cases = bsg.group_cases()
    # SD 1.5 / 2.x: 3 shapes x 2 dtypes x 2 batches; SDXL: 640x64x64 (fp16 needs batch 16 for
    # 64 MiB) and 320x128x128 (batch 8 is big in both); each with and without SiLU.
    assert len(cases) == (3 * 2 * 2 + 3 + 2) * 2
    assert all(c.groups == 32 and c.channels % 32 == 0 for c in cases)
    by_shape: dict = {}
    for c in cases:
        by_shape.setdefault((c.dtype, c.channels, c.height), set()).add(c.n)
    assert by_shape[("float16", 320, 64)] == {8, 32} and by_shape[("float32", 320, 64)] == {8, 16}
    assert by_shape[("float16", 1280, 16)] == {8, 128}
    assert by_shape[("float16", 640, 64)] == {8, 16} and by_shape[("float32", 640, 64)] == {8}
    assert by_shape[("float16", 320, 128)] == by_shape[("float32", 320, 128)] == {8}
    big = [c for c in cases if c.n > 8]
    assert len(big) == 14 and all(64 * MIB <= c.x_bytes < 128 * MIB for c in big)
    sd = {(320, 64), (640, 32), (1280, 16)}  # SD 1.5 / 2.x: batch 8 is under 64 MiB
    assert all(c.x_bytes < 64 * MIB for c in cases if c.n == 8 and (c.channels, c.height) in sd)


def test_grid_dtypes_are_the_kernels_types():
    assert set(bsg.GROUP_GRID["dtypes"]) == set(GROUPNORM_DTYPES)
    assert set(bsg.SKIP_GRID["dtypes"]) == set(_DTYPE_TAG)


def test_no_extra_batch_where_the_unet_batch_is_already_big():
    assert bsg.group_batches((320, 64, 64), "float32", min_bytes=MIB) == [8]
    assert bsg.group_batches((320, 64, 64), "float32", min_bytes=64 * MIB) == [8, 16]


def test_quick_keeps_the_narrowest_rows_and_one_group_shape():
    quick = bsg.quick_cases(bsg.skip_cases(), bsg.group_cases())
    skips = [c for c in quick if isinstance(c, bsg.SkipCase)]
    groups = [c for c in quick if isinstance(c, bsg.GroupCase)]
    assert len(skips) == 12 and {c.cols for c in skips} == {768}
    assert len(groups) == 8 and {c.channels for c in groups} == {320}


# -- bytes and rows ---------------------------------------------------------------------------


def test_bytes_moved_count_x_skip_out_and_the_sum_where_written():
    plain = bsg.SkipCase("layernorm", "float16", 65536, 768, False)
    summed = bsg.SkipCase("layernorm", "float16", 65536, 768, True)
    assert plain.x_bytes == 96 * MIB
    assert plain.moved_bytes == 3 * 96 * MIB and summed.moved_bytes == 4 * 96 * MIB
    g = bsg.GroupCase("float32", 16, 320, 64, 64, 32, True)
    assert g.spatial == 4096 and g.x_bytes == 80 * MIB and g.moved_bytes == 160 * MIB
    assert summed.label == "skip_layernorm float16 65536x768 +sum"
    assert g.label == "groupnorm+silu float32 16x320x64x64 g32"


def _row(**kw) -> dict:
    row = {"kind": "skip_norm", "label": "p", "dtype": "float16", "x_bytes": 96 * MIB, "moved_bytes": 3 * 96 * MIB,
           "ours_ms": 0.125, "torch_ms": 0.5, "copy_ms": 0.12, "max_abs_diff_vs_torch": 4e-3}  # fmt: skip
    return {**row, **kw}


def test_finish_row_bandwidths_ratios_and_goals():
    r = bsg.finish_row(_row(), copy_peak_gbps=2500.0)
    moved = 3 * 96 * MIB
    assert r["ours_gbps"] == pytest.approx(moved / 0.125e-3 / 1e9)  # 2416 GB/s
    assert r["copy_gbps"] == 2500.0 and r["copy_same_bytes_gbps"] == pytest.approx(moved / 0.12e-3 / 1e9)
    assert r["ours_vs_copy_peak"] == pytest.approx(r["ours_gbps"] / 2500.0)
    assert r["ours_vs_copy_same_bytes"] == pytest.approx(0.96)
    assert r["ours_vs_torch"] == pytest.approx(4.0)
    assert r["big"] and r["meets_copy_goal"] and r["meets_torch_goal"] and r["diff_ok"]
    assert bsg.goal_misses(r) == []


def test_finish_row_reports_each_missed_goal():
    slow = bsg.finish_row(_row(ours_ms=0.6), 2500.0)
    assert slow["meets_copy_goal"] is False and slow["meets_torch_goal"] is False
    why = bsg.goal_misses(slow)
    assert len(why) == 2 and "0.200 of the same-bytes copy" in why[0] and "x0.833 vs torch" in why[1]


def test_small_tensors_are_not_judged_on_the_copy_goal():
    r = bsg.finish_row(_row(x_bytes=21 * MIB, moved_bytes=42 * MIB, ours_ms=1.0, torch_ms=2.0), 2500.0)
    assert r["big"] is False and r["meets_copy_goal"] is None
    assert bsg.goal_misses(r) == []  # still 2x torch


@pytest.mark.parametrize("diff,sum_diff,ok", [(0.02, None, True), (0.04, None, False), (0.0, 0.05, False),
                                              (math.nan, None, False), (0.0, 0.0, True)])  # fmt: skip
def test_diff_tolerance_covers_the_sum_too(diff, sum_diff, ok):
    extra = {} if sum_diff is None else {"sum_max_abs_diff_vs_torch": sum_diff}
    assert bsg.finish_row(_row(max_abs_diff_vs_torch=diff, **extra), 2500.0)["diff_ok"] is ok


def test_summary_goals_misses_and_failures():
    good = bsg.finish_row(_row(label="good"), 2500.0)
    slow = bsg.finish_row(_row(label="slow", torch_ms=0.1), 2500.0)
    s = bsg.summarize([good], failed=[])
    assert s["met"] == {"copy_ratio_big": True, "torch_min": True} and s["misses"] == {}
    s = bsg.summarize([good, slow], failed=["broken"])
    assert s["met"] == {"copy_ratio_big": True, "torch_min": False}
    assert list(s["misses"]) == ["slow"] and s["failed"] == ["broken"]
    assert s["skip_norm"]["min_vs_torch"] == pytest.approx(0.8) and s["points"] == 2
    assert not bsg.summarize([])["met"]["torch_min"]  # no rows: nothing met


# -- arguments --------------------------------------------------------------------------------


def test_arguments():
    a = bsg.parse_args([])
    assert a.out == REPO / "bench" / "results" and a.min_mb == 64 and not a.quick
    a = bsg.parse_args(["--out", "/tmp/x", "--quick", "--min-mb", "0.5"])
    assert a.out == Path("/tmp/x") and a.quick and a.min_mb == 0.5


def test_arguments_reject_a_non_positive_size(capsys):
    with pytest.raises(SystemExit):
        bsg.parse_args(["--min-mb", "0"])
    assert "--min-mb must be positive" in capsys.readouterr().err


def test_run_script_has_the_stage_after_the_kernel_bench():
    text = (REPO / "bench" / "run_gpu_kernels.sh").read_text()
    bench = text.index("stage bench ")
    ours = text.index("bench/bench_skip_group.py --out \"$OUT\"")
    assert bench < ours < text.index('log "done')


# -- whole runs on the CPU --------------------------------------------------------------------


def _view(ptr: int, count: int, dtype: str) -> torch.Tensor:
    """The `count` elements at a raw CPU pointer, as a tensor sharing that memory."""
    nbytes = count * bsg.ELEM_BYTES[dtype]
    return torch.frombuffer((ctypes.c_char * nbytes).from_address(ptr), dtype=TDT[dtype])


def fake_skip_norm(module, op, dtype, x, skip, bias, gamma, beta, y, sum_out, rows, cols, eps):
    """The kernel's contract: the sum rounded after each add, the norm in float64, one rounding."""
    n = rows * cols
    s = (_view(x, n, dtype) + _view(skip, n, dtype)).view(rows, cols)
    if bias is not None:
        s = s + _view(bias, cols, dtype)
    if sum_out is not None:
        _view(sum_out, n, dtype).copy_(s.view(-1))
    s = s.double()
    g = _view(gamma, cols, dtype).double()
    if op == "layernorm":
        out = F.layer_norm(s, (cols,), g, _view(beta, cols, dtype).double(), eps)
    else:
        out = F.rms_norm(s, (cols,), g, eps)
    _view(y, n, dtype).copy_(out.view(-1))
    return f"fake_skip{op}_{dtype}"


def fake_groupnorm(module, dtype, x, gamma, beta, y, n, channels, groups, spatial, eps, silu, config=None):
    count = n * channels * spatial
    xv = _view(x, count, dtype).double().view(n, channels, spatial)
    out = F.group_norm(xv, groups, _view(gamma, channels, dtype).double(), _view(beta, channels, dtype).double(), eps)
    if silu:
        out = F.silu(out)
    _view(y, count, dtype).copy_(out.reshape(-1))
    return config[0] if config else f"fake_groupnorm_{dtype}"


@pytest.fixture
def on_cpu(monkeypatch):
    """The benchmark's GPU pieces replaced: CPU tensors, stand-in kernels and timings
    (ours 1 ms, torch 2 ms, copies 0.9 ms), two rotated buffer sets."""
    calls: list[str] = []

    def fake_time(launch, variants, torch_):
        for i in range(variants + 1):
            launch(i)
        calls.append(launch.__name__)
        return {"ours": 1.0, "ref": 2.0}.get(launch.__name__, 0.9), "fake"

    compiled = []
    module = types.SimpleNamespace(compile=lambda: compiled.append(1))
    monkeypatch.setattr(bsg, "DEVICE", "cpu")
    monkeypatch.setattr(bsg, "gpu_modules", lambda: (torch, types.SimpleNamespace()))
    monkeypatch.setattr(bsg, "device_meta", lambda t, c: {"device": "cpu", "torch": t.__version__, "cupy": None})
    monkeypatch.setattr(bsg, "load_kernel_module", lambda name: module)
    monkeypatch.setattr(bsg, "measure_copy_peak", lambda t: 2000.0)
    monkeypatch.setattr(bsg, "time_launches", fake_time)
    monkeypatch.setattr(bsg, "rotations", lambda nbytes: 2)
    monkeypatch.setattr(bsg, "_torch_stream", lambda c, t: contextlib.nullcontext())
    monkeypatch.setattr(bsg, "launch_skip_norm", fake_skip_norm)
    monkeypatch.setattr(bsg, "launch_groupnorm", fake_groupnorm)
    monkeypatch.setattr(bsg, "device_groupnorm_limits", lambda: (132, 232448))  # an H100's
    monkeypatch.setitem(bsg.GROUP_GRID, "batch", 1)
    torch.manual_seed(0)
    return types.SimpleNamespace(calls=calls, compiled=compiled)


def test_a_quick_run_on_the_cpu_writes_every_row(on_cpu, tmp_path):
    rc = bsg.main(["--out", str(tmp_path), "--quick", "--min-mb", "0.01"])
    assert rc == 0
    data = json.loads((tmp_path / bsg.RESULTS_NAME).read_text())
    meta, rows, summary = data["meta"], data["rows"], data["summary"]
    assert meta["copy_peak_gbps"] == 2000.0 and meta["device"] == "cpu" and meta["quick"] and "commit" in meta
    assert len(on_cpu.compiled) == 2
    skips = [r for r in rows if r["kind"] == "skip_norm"]
    groups = [r for r in rows if r["kind"] == "groupnorm"]
    assert len(skips) == 12 and len(groups) == 4 and summary["points"] == 16 and summary["failed"] == []
    for r in skips:
        assert r["cols"] == 768 and r["rows"] == (4 if r["dtype"] == "float32" else 8)
        assert r["kernel"] == f"fake_skip{r['op']}_{r['dtype']}" and r["bias"]
        assert r["moved_bytes"] == r["x_bytes"] * (4 if r["sum_out"] else 3)
        assert ("sum_max_abs_diff_vs_torch" in r) == r["sum_out"]
        if r["sum_out"]:
            assert r["sum_max_abs_diff_vs_torch"] == 0.0  # both round after each add
    for r in rows:
        assert r["diff_ok"], r
        assert r["max_abs_diff_vs_torch"] <= bsg.DIFF_TOL[r["dtype"]]
        assert r["ours_ms"] == 1.0 and r["torch_ms"] == 2.0 and r["ours_vs_torch"] == 2.0
        assert r["copy_gbps"] == 2000.0 and r["ours_vs_copy_same_bytes"] == pytest.approx(0.9)
        assert r["big"] is False and r["meets_copy_goal"] is None and r["rotated_buffers"] == 2
    assert {(r["n"], r["channels"], r["spatial"], r["groups"]) for r in groups} == {(1, 320, 4096, 32)}
    assert {(r["dtype"], r["silu"]) for r in groups} == {(d, s) for d in ("float32", "float16") for s in (False, True)}
    assert max(r["max_abs_diff_vs_torch"] for r in rows if r["dtype"] == "float32") < 1e-5
    # ours, torch and one copy per distinct size
    assert on_cpu.calls.count("ours") == on_cpu.calls.count("ref") == 16


def test_a_wrong_kernel_fails_the_run(on_cpu, monkeypatch, tmp_path):
    def swapped(module, op, dtype, x, skip, bias, gamma, beta, *rest):  # γ and β swapped
        return fake_skip_norm(module, op, dtype, x, skip, bias, beta or gamma, gamma if beta else None, *rest)

    monkeypatch.setattr(bsg, "launch_skip_norm", swapped)
    assert bsg.main(["--out", str(tmp_path), "--quick", "--min-mb", "0.01"]) == 1
    summary = json.loads((tmp_path / bsg.RESULTS_NAME).read_text())["summary"]
    assert summary["diff_failures"] and all(lbl.startswith("skip_layernorm") for lbl in summary["diff_failures"])
    assert len(summary["diff_failures"]) == 6


def test_a_point_that_raises_is_recorded_and_fails_the_run(on_cpu, monkeypatch, tmp_path):
    def broken(*args):
        raise RuntimeError("CUDA_ERROR_INVALID_VALUE")

    monkeypatch.setattr(bsg, "launch_groupnorm", broken)
    assert bsg.main(["--out", str(tmp_path), "--quick", "--min-mb", "0.01"]) == 1
    data = json.loads((tmp_path / bsg.RESULTS_NAME).read_text())
    assert len(data["rows"]) == 12 and len(data["summary"]["failed"]) == 4
    assert all(lbl.startswith("groupnorm") for lbl in data["summary"]["failed"])


def test_the_sweep_times_every_k_that_holds_the_group(on_cpu, tmp_path):
    rc = bsg.main(["--out", str(tmp_path), "--quick", "--min-mb", "0.01", "--sweep"])
    assert rc == 0
    assert not (tmp_path / bsg.RESULTS_NAME).exists()  # the sweep writes only its own file
    data = json.loads((tmp_path / bsg.SWEEP_NAME).read_text())
    rows = data["rows"]
    assert data["summary"] == {"failed": [], "diff_failures": []}
    # 320 channels / 32 groups x 64 x 64 = 40960 per group: fp32 holds it only at K = 40
    # (1024 threads: a CTA fills the SM, so the policy stages it), fp16 at K = 48 ... 80.
    by_label: dict = {}
    for r in rows:
        by_label.setdefault(r["label"], []).append((r["kernel"], r["block"], r["policy"]))
    assert by_label["groupnorm float32 1x320x64x64 g32"] == [
        ("fusion_groupnorm_reg_f32_v4_k40", 1024, False), ("fusion_groupnorm_staged_f32_v4_k40", 1024, True)]
    assert by_label["groupnorm+silu float16 1x320x64x64 g32"] == [
        ("fusion_groupnorm_reg_f16_v8_k48", 864, False), ("fusion_groupnorm_reg_f16_v8_k64", 640, False),
        ("fusion_groupnorm_reg_f16_v8_k80", 512, True)]  # fmt: skip
    assert all(r["vs_copy_same_bytes"] == pytest.approx(0.9) and r["max_abs_diff_vs_torch"] < 0.01 for r in rows)
    assert on_cpu.calls.count("ours") == len(rows) == 10


def test_the_sweep_skips_groups_the_vector_packs_cannot_hold():
    assert bsg.sweep_configs(bsg.GroupCase("float32", 1, 30, 7, 1, 5, False)) == []  # cols 42: scalar only
    assert [c[0][-3:] for c in bsg.sweep_configs(bsg.GroupCase("float16", 2, 64, 8, 8, 32, False))] == [
        "_k8", "k16", "k32", "k48", "k64", "k80"]  # fmt: skip


def test_the_sweep_times_the_wide_and_stream_launches_past_the_registers():
    h100 = (132, 232448)
    fp16 = bsg.sweep_configs(bsg.GroupCase("float16", 8, 320, 128, 128, 32, False), h100)  # 163840: both wide kernels
    assert fp16 == [("fusion_groupnorm_wide_f16_v8_k48", 132, 1024), ("fusion_groupnorm_wide_f16_v8_k64", 132, 1024),
                    ("fusion_groupnorm_stream_f16_v8", 1188, 128)]  # fmt: skip
    fp32 = bsg.sweep_configs(bsg.GroupCase("float32", 8, 320, 128, 128, 32, False), h100)  # a 384 KB tail
    assert fp32 == [("fusion_groupnorm_stream_f32_v4", 1188, 128)]
    assert bsg.sweep_configs(bsg.GroupCase("float32", 8, 320, 128, 128, 32, False)) == []  # no device extras
    fp32 = bsg.sweep_configs(bsg.GroupCase("float32", 8, 640, 64, 64, 32, False), h100)  # 81920: wide and stream
    assert fp32 == [("fusion_groupnorm_wide_f32_v4_k32", 132, 1024), ("fusion_groupnorm_stream_f32_v4", 1188, 128)]
