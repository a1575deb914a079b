"""Skip-norm and GroupNorm kernel benchmarks on a GPU, against the copy and torch.

Each kernel is compared with the device-to-device copy and torch's unfused equivalent.

    python bench/bench_skip_group.py [--out DIR] [--quick] [--min-mb 64] [--sweep]

Skip LayerNorm / RMSNorm (x + skip + bias, then the norm; with and without the sum written
out) on BERT-like rows x 768 / 1024 and a 4096-wide case, rows chosen so that each x is
>= 64 MiB; against torch's ``s = x + skip; s += bias; F.layer_norm(s) / F.rms_norm(s)``.
GroupNorm (32 groups, with and without the fused SiLU) on SD 1.5 / 2.x UNet blocks and SDXL's
two largest at batch 8 and at the batch that makes x >= 64 MiB; against ``F.group_norm``
(+ ``F.silu``).

The kernels run from the plugin's own sources through cupy.RawModule with the plugin's
launch policy (fusion.plugins.library.launch_skip_norm / launch_groupnorm), timed like
bench/bench_kernels.py (whose helpers this reuses): CUDA-graph replays over rotated
buffers, median of 5 batches.  Bytes moved count every tensor read or written: x, skip,
out and the sum where it is written (GroupNorm: x and y); the per-channel parameters are
left out.  Each row reports the bandwidth against the 1 GiB copy peak (`copy_gbps`) and
against a copy moving the same bytes (`copy_same_bytes_gbps`, the stricter one and the
goal's judge, as kernels_summary.json's `copy_ratio_big`).

``--sweep`` times every register-path K of each GroupNorm point instead (each with the fewest
threads that hold the group, and staged where a staged kernel exists; the policy's pick marked)
and writes DIR/kernels_groupnorm_sweep.json: the A/B behind the launch policy's CTA-size target
and its staging.

Goals (issue 12): >= 0.9 of the copy bandwidth on tensors >= 64 MiB, and never slower than
torch.  Writes DIR/kernels_skip_group.json (default bench/results/): meta, rows, summary.
Exits non-zero when a point fails to run or its output differs from torch's beyond
DIFF_TOL; a missed goal is reported, not an error.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import logging
import math
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.bench_kernels import (  # noqa: E402
    BIG_TENSOR, EPS, GOALS, commit_info, measure_copy_peak, rotations, time_launches)  # fmt: skip
from fusion.plugins.library import (  # noqa: E402
    device_groupnorm_limits, groupnorm_candidates, groupnorm_launch_config, launch_groupnorm, launch_skip_norm,
    load_kernel_module)  # fmt: skip

LOG = logging.getLogger("bench_skip_group")

RESULTS_NAME = "kernels_skip_group.json"
SWEEP_NAME = "kernels_groupnorm_sweep.json"
DEVICE = "cuda"  # (the CPU tests run the flow with stand-in kernels on "cpu")
ELEM_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
SKIP_GRID: dict[str, tuple] = {
    "ops": ("layernorm", "rmsnorm"),
    "dtypes": ("float32", "float16", "bfloat16"),
    "cols": (768, 1024, 4096),
    "sum_out": (False, True),
}
GROUP_GRID: dict[str, Any] = {
    "dtypes": ("float32", "float16"),  # the GroupNorm kernels' types
    # (C, H, W) of SD 1.5 / 2.x UNet blocks at 512x512, then SDXL's largest at 1024x1024 (its
    # 640 x 64 x 64 and 320 x 128 x 128 groups outgrow the register path: the wide path, and
    # fp32 320 x 128 x 128 the stream path).
    "shapes": ((320, 64, 64), (640, 32, 32), (1280, 16, 16), (640, 64, 64), (320, 128, 128)),
    "batch": 8,
    "groups": 32,
    "silu": (False, True),
}
COPY_GOAL = GOALS["copy_ratio_big"]
TORCH_GOAL = GOALS["torch_min"]
# Max |ours - torch| that still counts as the same result: a few units in the last place of
# outputs up to ~8 (torch rounds between its unfused steps, the kernels once).
DIFF_TOL = {"float32": 1e-3, "float16": 3e-2, "bfloat16": 0.25}


@dataclass(frozen=True)
class SkipCase:
    op: str
    dtype: str
    rows: int
    cols: int
    sum_out: bool

    @property
    def x_bytes(self) -> int:
        return self.rows * self.cols * ELEM_BYTES[self.dtype]

    @property
    def moved_bytes(self) -> int:
        """x and skip read, out written, and the sum where it is written (bias, γ, β left out)."""
        return self.x_bytes * (4 if self.sum_out else 3)

    @property
    def label(self) -> str:
        return f"skip_{self.op} {self.dtype} {self.rows}x{self.cols}{' +sum' if self.sum_out else ''}"


@dataclass(frozen=True)
class GroupCase:
    dtype: str
    n: int
    channels: int
    height: int
    width: int
    groups: int
    silu: bool

    @property
    def spatial(self) -> int:
        return self.height * self.width

    @property
    def x_bytes(self) -> int:
        return self.n * self.channels * self.spatial * ELEM_BYTES[self.dtype]

    @property
    def moved_bytes(self) -> int:
        """x read and y written (γ, β left out)."""
        return 2 * self.x_bytes

    @property
    def label(self) -> str:
        shape = "x".join(map(str, (self.n, self.channels, self.height, self.width)))
        return f"groupnorm{'+silu' if self.silu else ''} {self.dtype} {shape} g{self.groups}"


def pow2_at_least(v: float) -> int:
    return 1 << max(0, math.ceil(v) - 1).bit_length()


def big_rows(cols: int, dtype: str, min_bytes: int = BIG_TENSOR) -> int:
    """The fewest rows, a power of two (batch x sequence), that make x >= min_bytes."""
    return pow2_at_least(min_bytes / (cols * ELEM_BYTES[dtype]))


def skip_cases(min_bytes: int = BIG_TENSOR, grid: dict[str, tuple] = SKIP_GRID) -> list[SkipCase]:
    return [SkipCase(op, d, big_rows(c, d, min_bytes), c, s)
            for op in grid["ops"] for d in grid["dtypes"] for c in grid["cols"] for s in grid["sum_out"]]  # fmt: skip


def group_batches(chw: tuple[int, int, int], dtype: str, min_bytes: int = BIG_TENSOR, batch: int = 8) -> list[int]:
    """The UNet's batch, and the power-of-two batch that makes x >= min_bytes where that is larger."""
    per_image = math.prod(chw) * ELEM_BYTES[dtype]
    return sorted({batch, max(batch, pow2_at_least(min_bytes / per_image))})


def group_cases(min_bytes: int = BIG_TENSOR, grid: dict[str, Any] = GROUP_GRID) -> list[GroupCase]:
    return [GroupCase(d, n, c, h, w, grid["groups"], silu)
            for d in grid["dtypes"] for (c, h, w) in grid["shapes"]
            for n in group_batches((c, h, w), d, min_bytes, grid["batch"]) for silu in grid["silu"]]  # fmt: skip


def quick_cases(skips: list[SkipCase], groups: list[GroupCase]) -> list[SkipCase | GroupCase]:
    """A smoke test: the narrowest skip rows and the first GroupNorm shape."""
    narrow = min(c.cols for c in skips)
    chw = lambda g: (g.channels, g.height, g.width)  # noqa: E731
    first = chw(groups[0]) if groups else None
    return [c for c in skips if c.cols == narrow] + [g for g in groups if chw(g) == first]


# ------------------------------------------------------------------ rows


def finish_row(row: dict[str, Any], copy_peak_gbps: float) -> dict[str, Any]:
    """Derived fields of a timed row (needs moved_bytes, x_bytes, dtype, ours_ms, torch_ms,
    copy_ms, max_abs_diff_vs_torch): bandwidths, ratios and the goals, met or not."""
    moved = row["moved_bytes"]

    def gbps(ms: float) -> float:
        return moved / (ms * 1e-3) / 1e9

    row["ours_gbps"] = gbps(row["ours_ms"])
    row["torch_gbps"] = gbps(row["torch_ms"])
    row["copy_gbps"] = copy_peak_gbps
    row["copy_same_bytes_gbps"] = gbps(row["copy_ms"])
    row["ours_vs_copy_peak"] = row["ours_gbps"] / copy_peak_gbps
    row["ours_vs_copy_same_bytes"] = row["ours_gbps"] / row["copy_same_bytes_gbps"]
    row["ours_vs_torch"] = row["torch_ms"] / row["ours_ms"]
    row["big"] = row["x_bytes"] >= BIG_TENSOR
    row["meets_copy_goal"] = row["ours_vs_copy_same_bytes"] >= COPY_GOAL if row["big"] else None
    row["meets_torch_goal"] = row["ours_vs_torch"] >= TORCH_GOAL
    diffs = [row["max_abs_diff_vs_torch"], row.get("sum_max_abs_diff_vs_torch") or 0.0]
    row["diff_ok"] = all(math.isfinite(d) and d <= DIFF_TOL[row["dtype"]] for d in diffs)
    return row


def goal_misses(row: dict[str, Any]) -> list[str]:
    why = []
    if row["meets_copy_goal"] is False:
        why.append(f"{row['ours_vs_copy_same_bytes']:.3f} of the same-bytes copy (< {COPY_GOAL})")
    if not row["meets_torch_goal"]:
        why.append(f"x{row['ours_vs_torch']:.3f} vs torch (< {TORCH_GOAL})")
    return why


def summarize(rows: list[dict[str, Any]], failed: Sequence[str] = ()) -> dict[str, Any]:
    big = [r for r in rows if r["big"]]
    s: dict[str, Any] = {"goals": {"copy_ratio_big": COPY_GOAL, "torch_min": TORCH_GOAL}, "points": len(rows),
                         "big_points": len(big), "failed": list(failed)}  # fmt: skip
    for kind in sorted({r["kind"] for r in rows}):
        mine = [r for r in rows if r["kind"] == kind]
        mine_big = [r for r in mine if r["big"]]
        s[kind] = {
            "points": len(mine),
            "big_min_vs_copy_same_bytes": min((r["ours_vs_copy_same_bytes"] for r in mine_big), default=None),
            "big_min_vs_copy_peak": min((r["ours_vs_copy_peak"] for r in mine_big), default=None),
            "big_median_vs_copy_peak": (statistics.median([r["ours_vs_copy_peak"] for r in mine_big])
                                        if mine_big else None),  # fmt: skip
            "min_vs_torch": min(r["ours_vs_torch"] for r in mine),
            "median_vs_torch": statistics.median([r["ours_vs_torch"] for r in mine]),
            "max_abs_diff_vs_torch": max(r["max_abs_diff_vs_torch"] for r in mine),
        }
    s["misses"] = {r["label"]: goal_misses(r) for r in rows if goal_misses(r)}
    s["diff_failures"] = [r["label"] for r in rows if not r["diff_ok"]]
    s["met"] = {
        "copy_ratio_big": bool(big) and all(r["meets_copy_goal"] for r in big),
        "torch_min": bool(rows) and all(r["meets_torch_goal"] for r in rows),
    }
    return s


def format_table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'point':<44} {'ours ms':>8} {'torch ms':>8} {'GB/s':>6} {'/peak':>6} {'/same':>6} {'vs torch':>8}"
            f" {'max diff':>9}")  # fmt: skip
    lines = [head, "-" * len(head)]
    for r in rows:
        mark = "" if not goal_misses(r) and r["diff_ok"] else "  <-- " + ("diff" if not r["diff_ok"] else "goal")
        lines.append(f"{r['label']:<44} {r['ours_ms']:8.3f} {r['torch_ms']:8.3f} {r['ours_gbps']:6.0f}"
                     f" {r['ours_vs_copy_peak']:6.3f} {r['ours_vs_copy_same_bytes']:6.3f} {r['ours_vs_torch']:8.2f}"
                     f" {r['max_abs_diff_vs_torch']:9.2e}{mark}")  # fmt: skip
    return "\n".join(lines)


# ------------------------------------------------------------------ timing on the GPU


def _torch_dtype(torch: Any, name: str) -> Any:
    return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[name]


def _torch_stream(cupy: Any, torch: Any) -> Any:
    """torch's current stream as CuPy's (the launch helpers run on CuPy's current stream)."""
    return cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)


_COPY_MS: dict[int, float] = {}


def copy_same_bytes_ms(moved: int, torch: Any) -> float:
    """ms of a device copy that moves `moved` bytes (moved/2 read, moved/2 written), rotated
    like the kernels; one timing per size."""
    if moved not in _COPY_MS:
        half = moved // 2
        n = rotations(moved)
        src = [torch.empty(half, dtype=torch.uint8, device=DEVICE) for _ in range(n)]
        dst = [torch.empty_like(src[0]) for _ in range(n)]
        _COPY_MS[moved] = time_launches(lambda i: dst[i % n].copy_(src[i % n]), n, torch)[0]
        src.clear()
        dst.clear()
    return _COPY_MS[moved]


def _max_diff(a: Any, b: Any) -> float:
    return (a.float() - b.float()).abs().max().item()


def bench_skip(case: SkipCase, module: Any, torch: Any, cupy: Any) -> dict[str, Any]:
    import torch.nn.functional as F  # noqa: N812

    tdt = _torch_dtype(torch, case.dtype)
    rows, cols = case.rows, case.cols
    n = rotations(case.moved_bytes)
    gen = torch.Generator(device=DEVICE).manual_seed(rows * 31 + cols)

    def randn(*shape: int, scale: float = 1.0, shift: float = 0.0) -> Any:
        return (torch.randn(*shape, device=DEVICE, generator=gen) * scale + shift).to(tdt)

    xs = [randn(rows, cols) for _ in range(n)]
    ks = [randn(rows, cols) for _ in range(n)]
    ys = [torch.empty_like(xs[0]) for _ in range(n)]
    sums = [torch.empty_like(xs[0]) for _ in range(n)] if case.sum_out else []
    bias, gamma, beta = randn(cols, scale=0.1), randn(cols, scale=0.1, shift=1.0), randn(cols, scale=0.1)
    layer = case.op == "layernorm"
    names: list[str] = []

    def ours(i: int) -> None:
        with _torch_stream(cupy, torch):
            names.append(launch_skip_norm(
                module, case.op, case.dtype, xs[i % n].data_ptr(), ks[i % n].data_ptr(), bias.data_ptr(),
                gamma.data_ptr(), beta.data_ptr() if layer else None, ys[i % n].data_ptr(),
                sums[i % n].data_ptr() if case.sum_out else None, rows, cols, EPS))  # fmt: skip

    def ref(i: int) -> tuple[Any, Any]:
        s = torch.add(xs[i % n], ks[i % n])
        s.add_(bias)  # (in place: torch's fewest allocations; rounds after each add, as the kernel)
        y = F.layer_norm(s, (cols,), gamma, beta, EPS) if layer else F.rms_norm(s, (cols,), gamma, EPS)
        return s, y

    ours(0)
    want_s, want_y = ref(0)
    row: dict[str, Any] = {"kind": "skip_norm", "label": case.label, **asdict(case), "bias": True,
                           "x_bytes": case.x_bytes, "moved_bytes": case.moved_bytes, "kernel": names[0],
                           "max_abs_diff_vs_torch": _max_diff(ys[0], want_y)}  # fmt: skip
    if case.sum_out:
        row["sum_max_abs_diff_vs_torch"] = _max_diff(sums[0], want_s)
    del want_s, want_y
    row["ours_ms"], how = time_launches(ours, n, torch)
    row["torch_ms"], how_t = time_launches(ref, n, torch)
    row["copy_ms"] = copy_same_bytes_ms(case.moved_bytes, torch)
    row["timing"] = how if how == how_t else f"{how}/{how_t}"
    row["rotated_buffers"] = n
    for bufs in (xs, ks, ys, sums):
        bufs.clear()
    torch.cuda.empty_cache()
    return row


def _group_buffers(case: GroupCase, torch: Any) -> tuple[list, list, Any, Any]:
    """(xs, ys, gamma, beta): rotated x and y, seeded by the case."""
    tdt = _torch_dtype(torch, case.dtype)
    shape = (case.n, case.channels, case.height, case.width)
    n = rotations(case.moved_bytes)
    gen = torch.Generator(device=DEVICE).manual_seed(case.n * 31 + case.channels)
    xs = [torch.randn(*shape, device=DEVICE, generator=gen).to(tdt) for _ in range(n)]
    ys = [torch.empty_like(xs[0]) for _ in range(n)]
    gamma = (1 + 0.1 * torch.randn(case.channels, device=DEVICE, generator=gen)).to(tdt)
    beta = (0.1 * torch.randn(case.channels, device=DEVICE, generator=gen)).to(tdt)
    return xs, ys, gamma, beta


def _group_launcher(case: GroupCase, module: Any, cupy: Any, torch: Any, bufs: tuple, names: list[str],
                    config: tuple[str, int, int] | None = None) -> Any:  # fmt: skip
    xs, ys, gamma, beta = bufs
    n = len(xs)

    def ours(i: int) -> None:
        with _torch_stream(cupy, torch):
            names.append(launch_groupnorm(module, case.dtype, xs[i % n].data_ptr(), gamma.data_ptr(), beta.data_ptr(),
                                          ys[i % n].data_ptr(), case.n, case.channels, case.groups, case.spatial,
                                          EPS, case.silu, config))  # fmt: skip

    return ours


def _group_reference(case: GroupCase, bufs: tuple) -> Any:
    import torch.nn.functional as F  # noqa: N812

    xs, _, gamma, beta = bufs

    def ref(i: int) -> Any:
        y = F.group_norm(xs[i % len(xs)], case.groups, gamma, beta, EPS)
        return F.silu(y, inplace=True) if case.silu else y

    return ref


def bench_group(case: GroupCase, module: Any, torch: Any, cupy: Any) -> dict[str, Any]:
    bufs = _group_buffers(case, torch)
    xs, ys = bufs[0], bufs[1]
    n = len(xs)
    names: list[str] = []
    ours = _group_launcher(case, module, cupy, torch, bufs, names)
    ref = _group_reference(case, bufs)
    ours(0)
    row: dict[str, Any] = {"kind": "groupnorm", "label": case.label, **asdict(case), "spatial": case.spatial,
                           "x_bytes": case.x_bytes, "moved_bytes": case.moved_bytes, "kernel": names[0],
                           "max_abs_diff_vs_torch": _max_diff(ys[0], ref(0))}  # fmt: skip
    row["ours_ms"], how = time_launches(ours, n, torch)
    row["torch_ms"], how_t = time_launches(ref, n, torch)
    row["copy_ms"] = copy_same_bytes_ms(case.moved_bytes, torch)
    row["timing"] = how if how == how_t else f"{how}/{how_t}"
    row["rotated_buffers"] = n
    for buf in (xs, ys):
        buf.clear()
    torch.cuda.empty_cache()
    return row


def sweep_configs(case: GroupCase, device: tuple[int, int] = (0, 0)) -> list[tuple[str, int, int]]:
    """Every launch of the vector packs that holds the case's group: each register-path K with
    the fewest threads (<= 1024) that cover it, its staged launch where there is one, the wide
    and stream launches where no K holds it (device: (stage_sms, smem_optin, stream_ctas), as
    groupnorm_plan's).  The A/B behind the policy's CTA-size target, its staging, its wide path
    and its stream path."""
    return groupnorm_candidates(case.dtype, case.n * case.groups, case.channels // case.groups * case.spatial,
                                *device)  # fmt: skip


def sweep_group(case: GroupCase, module: Any, torch: Any, cupy: Any) -> list[dict[str, Any]]:
    """One row per sweep_configs launch: its time against the same-bytes copy and whether it is
    the policy's choice; outputs checked against torch."""
    bufs = _group_buffers(case, torch)
    xs, ys = bufs[0], bufs[1]
    want = _group_reference(case, bufs)(0)
    device = device_groupnorm_limits()
    policy = groupnorm_launch_config(case.dtype, case.n, case.channels, case.groups, case.spatial, True, *device)
    copy_ms = copy_same_bytes_ms(case.moved_bytes, torch)
    rows = []
    for config in sweep_configs(case, device):
        names: list[str] = []
        ours = _group_launcher(case, module, cupy, torch, bufs, names, config)
        ours(0)
        ms, how = time_launches(ours, len(xs), torch)
        rows.append({"kind": "groupnorm_sweep", "label": case.label, "dtype": case.dtype, "silu": case.silu,
                     "x_bytes": case.x_bytes, "kernel": config[0], "block": config[2], "policy": config == policy,
                     "ours_ms": ms, "copy_ms": copy_ms, "vs_copy_same_bytes": copy_ms / ms, "timing": how,
                     "max_abs_diff_vs_torch": _max_diff(ys[0], want)})  # fmt: skip
        LOG.info("sweep %-44s %-34s block %4d  %.3f of the same-bytes copy%s", case.label, config[0], config[2],
                 copy_ms / ms, "  (policy)" if config == policy else "")  # fmt: skip
    for buf in (xs, ys):
        buf.clear()
    torch.cuda.empty_cache()
    return rows


# ------------------------------------------------------------------ main


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results", help="folder for " + RESULTS_NAME)
    ap.add_argument("--quick", action="store_true", help="the narrowest skip rows and one GroupNorm shape (smoke test)")
    ap.add_argument("--min-mb", type=float, default=BIG_TENSOR / 2**20,
                    help="smallest x of the big points, MiB (default: the goal's 64)")  # fmt: skip
    ap.add_argument("--sweep", action="store_true",
                    help=f"GroupNorm only: time every register-path K of each point (the launch policy's A/B), "
                         f"to {SWEEP_NAME}")  # fmt: skip
    args = ap.parse_args(argv)
    if not args.min_mb > 0:
        ap.error(f"--min-mb must be positive, not {args.min_mb}")
    return args


def gpu_modules() -> tuple[Any, Any]:
    """(torch, cupy), imported only where the benchmark runs."""
    try:
        import cupy  # noqa: PLC0415
        import torch  # noqa: PLC0415
    except ImportError as e:
        raise SystemExit(f"bench_skip_group needs CuPy and torch with CUDA: {e}") from None
    return torch, cupy


def device_meta(torch: Any, cupy: Any) -> dict[str, Any]:
    return {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cupy": cupy.__version__}


def write_results(path: Path, meta: dict, rows: list[dict], summary: dict | None) -> None:
    path.write_text(json.dumps({"meta": meta, "rows": rows, "summary": summary}, indent=1))


@contextlib.contextmanager
def _timed(what: str) -> Iterator[None]:
    t0 = time.time()
    yield
    LOG.info("%s in %.1fs", what, time.time() - t0)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch, cupy = gpu_modules()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / RESULTS_NAME
    min_bytes = int(args.min_mb * 2**20)
    cases: list[SkipCase | GroupCase] = [*skip_cases(min_bytes), *group_cases(min_bytes)]
    if args.quick:
        cases = quick_cases(skip_cases(min_bytes), group_cases(min_bytes))
    meta: dict[str, Any] = {**device_meta(torch, cupy), **commit_info(),
                            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                            "quick": args.quick, "min_x_bytes": min_bytes, "eps": EPS}  # fmt: skip
    LOG.info("%s", meta)
    with _timed("kernels compiled"):
        modules = {"skip_norm": load_kernel_module("skipnorm"), "groupnorm": load_kernel_module("groupnorm")}
        for m in modules.values():
            m.compile()
    meta["copy_peak_gbps"] = measure_copy_peak(torch)
    torch.cuda.empty_cache()  # (its 3 GiB)
    LOG.info("copy peak (1 GiB) %.0f GB/s; %d points", meta["copy_peak_gbps"], len(cases))
    if args.sweep:
        return run_sweep(args.out / SWEEP_NAME, meta, [c for c in cases if isinstance(c, GroupCase)],
                         modules["groupnorm"], torch, cupy)  # fmt: skip
    _COPY_MS.clear()
    rows: list[dict[str, Any]] = []
    failed: list[str] = []
    t0 = time.time()
    for case in cases:
        row = None
        try:
            if isinstance(case, SkipCase):
                row = bench_skip(case, modules["skip_norm"], torch, cupy)
            else:
                row = bench_group(case, modules["groupnorm"], torch, cupy)
        except Exception as e:  # noqa: BLE001 - one bad point must not lose the rest
            LOG.error("%s failed: %s", case.label, e)
            failed.append(case.label)
        if row is None:
            torch.cuda.empty_cache()  # (the failed point's buffers, its traceback gone)
            continue
        rows.append(finish_row(row, meta["copy_peak_gbps"]))
        LOG.info("%-44s ours %6.0f GB/s (%.3f of peak, %.3f of same-bytes copy)  x%.2f vs torch  diff %.1e",
                 case.label, row["ours_gbps"], row["ours_vs_copy_peak"], row["ours_vs_copy_same_bytes"],
                 row["ours_vs_torch"], row["max_abs_diff_vs_torch"])  # fmt: skip
        write_results(path, meta, rows, None)
    summary = summarize(rows, failed)
    meta["seconds"] = round(time.time() - t0, 1)
    write_results(path, meta, rows, summary)
    LOG.info("results in %s\n%s", path, format_table(rows))
    LOG.info("summary: %s", json.dumps({k: v for k, v in summary.items() if k != "misses"}, indent=1))
    for label, why in summary["misses"].items():
        LOG.warning("goal missed: %s: %s", label, "; ".join(why))
    for label in summary["diff_failures"]:
        LOG.error("differs from torch beyond %s: %s", DIFF_TOL, label)
    return 1 if failed or summary["diff_failures"] else 0


def run_sweep(path: Path, meta: dict[str, Any], cases: list[GroupCase], module: Any, torch: Any, cupy: Any) -> int:
    _COPY_MS.clear()
    rows: list[dict[str, Any]] = []
    failed = []
    for case in cases:
        try:
            rows += sweep_group(case, module, torch, cupy)
        except Exception as e:  # noqa: BLE001 - one bad point must not lose the rest
            LOG.error("%s failed: %s", case.label, e)
            failed.append(case.label)
            torch.cuda.empty_cache()
        write_results(path, meta, rows, None)
    bad = [f"{r['label']} {r['kernel']}" for r in rows if not r["max_abs_diff_vs_torch"] <= DIFF_TOL[r["dtype"]]]
    write_results(path, meta, rows, {"failed": failed, "diff_failures": bad})
    LOG.info("sweep: %d launches in %s", len(rows), path)
    for label in bad:
        LOG.error("differs from torch beyond %s: %s", DIFF_TOL, label)
    return 1 if failed or bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
