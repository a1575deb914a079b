"""Command line: one subcommand per job.

    python -m fusion fuse model.onnx -o fused.onnx        # or --dry-run
    python -m fusion verify model.onnx fused.onnx
    python -m fusion list
    python -m fusion plugins build | check LIB
    python -m fusion docs [--check]                       # the README's generated tables
    python -m fusion build fused.onnx -o model.engine --shapes ...   (needs TensorRT)

Errors become one line on stderr and exit code 2 (bad input) or 3 (a bug here); ``--debug``
shows the traceback instead.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from pathlib import Path
from typing import Callable, Sequence

from .errors import FusionError

log = logging.getLogger("fusion")

TARGETS = ("plugin", "trt", "onnx")


# -- argument groups (shared by subcommands) -------------------------------------------


def _add_fusion_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("fusion")
    g.add_argument("--passes", help="comma-separated passes (default: all but those the target leaves out: gemm for trt; see `list`)")
    g.add_argument("--target", choices=TARGETS, default="plugin", help="what fused nodes become (default: plugin)")
    g.add_argument("--no-functions", action="store_true", help="do not attach ONNX function bodies to custom ops")
    g.add_argument("--no-validate", action="store_true", help="skip onnx.checker (full) on the output")


def _add_verify_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("verification")
    g.add_argument(
        "--shapes",
        nargs="+",
        metavar="POINT",
        help="shape points, each 'dim=value,...' or 'input:AxBxC,...' (default: every dynamic dim 1, 3, 8)",
    )
    g.add_argument("--atol", type=float, help="absolute tolerance for every output (default: by dtype)")
    g.add_argument("--rtol", type=float, help="relative tolerance for every output (default: by dtype)")
    g.add_argument("--seed", type=int, default=0, help="seed for random inputs")
    g.add_argument(
        "--extra-checks",
        metavar="LIST",
        help="comma-separated extra checks beyond random inputs: 'initializers fed', 'zero-size dim', "
        "'large mean', or none / all (default: fusion.verify.DEFAULT_EXTRA_CHECKS)",
    )


def _add_output_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


# -- subcommands ------------------------------------------------------------------------


def cmd_fuse(args: argparse.Namespace) -> int:
    from . import api, report

    if args.tune:  # build and time engines: keep what makes them faster (fusion/tuning.py)
        from .tuning import run_cli

        return run_cli(args)
    passes = _split(args.passes) if args.passes else None
    if args.report:  # before anything is written: a bad report path must not cost the model
        from .html_report import check_report_path  # noqa: PLC0415

        check_report_path(args.report, [p for p in (args.model, args.output) if p])
    if args.dry_run:
        result = api.inspect(args.model, passes, target=args.target, assume_constant_initializers=args.freeze_initializers)
        print(report.to_json(result) if args.json else report.text(result, dry_run=True))
        if args.report:
            from .html_report import write_report  # noqa: PLC0415 - optional, heavier imports

            write_report(args.model, None, result, args.report)  # no fused model: verify is skipped
        return 0
    if not args.output:
        raise FusionError("fuse needs -o OUTPUT (or --dry-run)")
    with contextlib.ExitStack() as keep:
        original = args.model
        if args.report and _same_file(args.model, args.output):
            # In place: the report compares with (and draws) the original, so keep it.
            from .html_report import snapshot  # noqa: PLC0415

            original = keep.enter_context(snapshot(args.model))
        result = api.fuse_file(
            args.model,
            args.output,
            passes,
            target=args.target,
            functions=not args.no_functions,
            validate=not args.no_validate,
            assume_constant_initializers=args.freeze_initializers,
        )
        print(report.to_json(result) if args.json else report.text(result))
        if not result.modified:
            log.info("nothing fused: %s is a copy of the input", args.output)
        if args.report:
            from .html_report import write_report  # noqa: PLC0415 - optional, heavier imports

            write_report(original, args.output, result, args.report, shown_as=args.model)
    return 0


def _same_file(a: str, b: str) -> bool:
    try:
        if os.path.exists(a) and os.path.exists(b):
            return os.path.samefile(a, b)
    except OSError:
        pass
    return os.path.realpath(a) == os.path.realpath(b)


def cmd_verify(args: argparse.Namespace) -> int:
    from .verify import verify

    kwargs = {}
    if args.trt:
        kwargs = _engine_options(args)
        kwargs["profiles"] = _profiles(args.profile)
        kwargs["latency"] = not args.no_latency
    rep = verify(
        args.original,
        args.fused,
        extra_checks=_extra_checks(args.extra_checks),
        shapes=_parse_shapes(args.shapes),
        atol=args.atol,
        rtol=args.rtol,
        seed=args.seed,
        backend="trt" if args.trt else "onnxruntime",
        **kwargs,
    )
    print(json.dumps(rep.to_dict(), indent=2) if args.json else rep.table())
    return 0 if rep.passed else 1


def _extra_checks(text: str | None):
    from .verify import EXTRA_CHECKS  # noqa: PLC0415

    if text is None:
        return True
    if text.strip().lower() == "none":
        return False
    if text.strip().lower() == "all":
        return list(EXTRA_CHECKS)
    return _split(text)  # (verify names the unknown ones)


def cmd_demo(args: argparse.Namespace) -> int:
    """Fuse the embedded example models, verify them, and say where the results are."""
    from importlib import resources

    from . import api, report
    from .verify import verify

    out_dir = Path(args.output or "fusion-demo")
    out_dir.mkdir(parents=True, exist_ok=True)
    examples = resources.files("fusion") / "examples"
    ok = True
    for name in ("bert_tiny", "llama_tiny"):
        with resources.as_file(examples / f"{name}.onnx") as src:
            dst = out_dir / f"{name}.fused.onnx"
            print(f"== {name}: {src.name} -> {dst}")
            result = api.fuse_file(src, dst, target=args.target)
            print(report.text(result))
            rep = verify(src, dst)
            print(rep.table())
            ok &= rep.passed
    return 0 if ok else 1


def cmd_list(args: argparse.Namespace) -> int:
    from . import specs
    from .patterns import RULES

    data = {
        "passes": sorted({r.pass_name for r in RULES}),
        "rules": [{"name": r.name, "pass": r.pass_name, "pattern": r.doc} for r in RULES],
        "targets": {
            "plugin": "this project's plugins (plugin_src/), with ONNX function bodies",
            "trt": "plugins shipped in TensorRT's libnvinfer_plugin",
            "onnx": "standard ONNX ops (LayerNormalization opset 17, RMSNormalization opset 23)",
        },
        "specs": [s.to_dict() for s in specs.SPECS],
    }
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    print("passes and rules:")
    for r in data["rules"]:
        print(f"  {r['pass']:<10} {r['name']:<14} {r['pattern']}")
    print("\ntargets:")
    for k, v in data["targets"].items():
        print(f"  {k:<7} {v}")
    print("\nplugin specs:")
    for s in specs.SPECS:
        fields = ", ".join(f"{f.name}:{f.type.onnx_name}" for f in s.fields)
        ins = ", ".join(p.name + ("?" if p.optional else "") for p in s.inputs)
        ns = s.namespace or '""'
        print(f"  {s.op_type} v{s.version} ns={ns} [{s.provider}] inputs({ins}) fields({fields})")
    return 0


def cmd_plugins_build(args: argparse.Namespace) -> int:
    from . import plugin_lib

    lib = plugin_lib.build_library(Path(args.output) if args.output else None, archs=args.arch or ["sm_90"],
                                   trt=args.trt, tensorrt_include=args.tensorrt_include)  # fmt: skip
    print(lib)
    return 0


def cmd_plugins_check(args: argparse.Namespace) -> int:
    from . import plugin_lib

    problems = plugin_lib.check_library(Path(args.library))
    if problems:
        for p in problems:
            print(f"mismatch: {p}")
        return 1
    print(f"{args.library}: every creator matches its spec")
    return 0


def cmd_docs(args: argparse.Namespace) -> int:
    from . import docs

    path = Path(args.readme) if args.readme else docs.default_readme()
    if args.check:
        if not path.is_file():
            raise FusionError(f"no README at {path}")
        stale = docs.stale_sections(path.read_text(encoding="utf-8"))
        if stale:
            print(f"{path}: out of date: {', '.join(stale)} (run: python -m fusion docs)")
            return 1
        print(f"{path}: generated sections up to date")
        return 0
    changed = docs.update(path)
    print(f"{path}: {'rewritten' if changed else 'already up to date'}")
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    from .trt import build_engine  # noqa: PLC0415 - TensorRT is optional

    built = build_engine(args.model, shapes=_profiles(args.shapes), out=args.output, **_engine_options(args))
    info = built.summary()
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print(f"{args.output}: TensorRT {info['trt_version']}, {info['precision']}, {info['network_layers']} layers, "
          f"{len(info['plugin_layers'])} plugin layers, built in {info['build_s']:.1f}s")
    for k, prof in enumerate(info["profiles"]):
        print(f"  profile {k}: " + "; ".join(f"{n} min {r[0]} opt {r[1]} max {r[2]}" for n, r in prof.items()))
    for p in info["plugin_layers"]:
        print(f"  plugin layer: {p}")
    return 0


def _engine_options(args: argparse.Namespace) -> dict:
    """Build options shared by `build` and `verify --trt`."""
    opts: dict = {"plugins": args.plugins or [], "precision": args.precision}
    if args.no_tactic_sources:
        opts["tactic_sources"] = []
    if args.timing_cache:
        opts["timing_cache"] = args.timing_cache
    return opts


def _profiles(groups: Sequence[Sequence[str]] | None) -> list[dict] | None:
    """Each --shapes/--profile occurrence is one optimization profile."""
    if not groups:
        return None
    from .trt_profiles import parse_profile  # noqa: PLC0415

    return [parse_profile(g) for g in groups]


# -- parser -----------------------------------------------------------------------------


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m fusion", description="Fuse ONNX subgraphs into TensorRT plugin nodes.")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("fuse", help="fuse a model (or --dry-run: what would fuse, and why not)")
    p.add_argument("model", help="input .onnx")
    p.add_argument("-o", "--output", help="output .onnx (may equal the input: written atomically)")
    p.add_argument("--dry-run", action="store_true", help="report matches and near-misses; write nothing")
    p.add_argument("--report", help="also write an HTML report of every fusion to this path")
    p.add_argument(
        "--freeze-initializers",
        action="store_true",
        help="treat initializers listed as graph inputs as constants; the output stops listing them as inputs",
    )
    _add_fusion_args(p)
    _add_output_args(p)
    from .tuning import add_cli_args  # noqa: PLC0415

    add_cli_args(p)
    p.set_defaults(func=cmd_fuse)

    p = sub.add_parser("verify", help="compare a fused model with the original")
    p.add_argument("original")
    p.add_argument("fused")
    p.add_argument("--trt", action="store_true", help="run the fused model on TensorRT instead of onnxruntime")
    g = p.add_argument_group("TensorRT (with --trt)")
    g.add_argument(
        "--profile",
        nargs="+",
        action="append",
        metavar="RANGE",
        help="an optimization profile: input:MIN,OPT,MAX shapes (1x1,8x128,32x512) or dim=MIN,OPT,MAX; repeat for "
        "more profiles; inputs default to each profile's min/opt/max (default profile: spans the verify shapes)",
    )
    _add_engine_args(g)
    g.add_argument("--no-latency", action="store_true",
                   help="skip building the original's engine and timing both engines (fused/unfused speed-up per shape)")
    _add_verify_args(p)
    _add_output_args(p)
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("demo", help="fuse and verify the embedded example models (a tiny BERT and LLaMA)")
    p.add_argument("-o", "--output", help="directory for the fused models (default: ./fusion-demo)")
    p.add_argument("--target", choices=TARGETS, default="plugin")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("list", help="patterns, targets and plugin specs")
    _add_output_args(p)
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("plugins", help="build or check the plugin library")
    psub = p.add_subparsers(dest="plugins_command", required=True, metavar="ACTION")
    b = psub.add_parser("build", help="compile plugin_src into one shared library")
    b.add_argument("-o", "--output", help="output directory (default: plugin_build)")
    b.add_argument("--arch", nargs="+", help="GPU architectures (default: sm_90)")
    b.add_argument("--trt", type=int, choices=(10, 8), default=10,
                   help="10: IPluginV3 libfusion_plugins.so (default); 8: IPluginV2DynamicExt libfusion_plugins_trt8.so")
    b.add_argument("--tensorrt-include", metavar="DIR",
                   help="headers of the TensorRT to build for (else $TENSORRT_INCLUDE; --trt 8 without: our own)")
    b.set_defaults(func=cmd_plugins_build)
    c = psub.add_parser("check", help="compare a library's creators with the plugin specs (either flavour, no GPU needed)")
    c.add_argument("library")
    c.set_defaults(func=cmd_plugins_check)

    p = sub.add_parser("docs", help="regenerate the README's tables from the specs, rules and CLI (or --check)")
    p.add_argument("--check", action="store_true", help="exit 1 if the README's generated tables are out of date")
    p.add_argument("--readme", help="README path (default: the checkout's README.md)")
    p.set_defaults(func=cmd_docs)

    p = sub.add_parser("build", help="build a TensorRT engine (needs TensorRT)")
    _add_build_args(p)
    p.set_defaults(func=cmd_build)
    return parser


def _add_build_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model")
    p.add_argument("-o", "--output", required=True, help="engine file")
    p.add_argument(
        "--shapes",
        "--profile",
        dest="shapes",
        nargs="+",
        action="append",
        metavar="RANGE",
        help="an optimization profile: input:MIN,OPT,MAX shapes (input_ids:1x1,8x128,32x512) or dim=MIN,OPT,MAX "
        "(batch=1,8,32); inputs sharing a dim name share its range; repeat the option for more profiles",
    )
    _add_engine_args(p)
    _add_output_args(p)


def _add_engine_args(p) -> None:
    p.add_argument("--plugins", nargs="+", default=[], help="plugin libraries to load before parsing")
    p.add_argument("--precision", choices=("fp32", "tf32", "fp16"), default="fp32",
                   help="fp32 (TF32 off), tf32 or fp16 (default: fp32)")  # fmt: skip
    p.add_argument("--no-tactic-sources", action="store_true",
                   help="allow no cuBLAS/cuDNN tactics (TensorRT 8.5 where those libraries are absent)")  # fmt: skip
    p.add_argument("--timing-cache", metavar="FILE", help="TensorRT timing cache to read and update")


def main(argv: Sequence[str] | None = None) -> int:
    parser = make_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except FusionError as e:
        if args.debug:
            raise
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a bug here, not bad input: still one line unless --debug
        if args.debug:
            raise
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        print(f"internal error: {type(e).__name__}: {first} (rerun with --debug for the traceback)", file=sys.stderr)
        return 3


def _split(s: str) -> list[str]:
    return [p.strip() for p in s.split(",") if p.strip()]


def _parse_shapes(points: Sequence[str] | None) -> list[dict] | None:
    """'batch=2,seq=16' or 'input_ids:2x16,mask:2x16' -> [{...}]"""
    if not points:
        return None
    out = []
    for point in points:
        d: dict = {}
        for item in _split(point):
            if "=" in item:
                k, v = item.split("=", 1)
                d[k.strip()] = _int(v, point)
            elif ":" in item:
                k, v = item.rsplit(":", 1)
                d[k.strip()] = [_int(x, point) for x in v.lower().split("x")]
            else:
                raise FusionError(f"bad shape point {point!r}: use dim=value or input:AxBxC")
        out.append(d)
    return out


def _int(v: str, point: str) -> int:
    try:
        return int(v)
    except ValueError:
        raise FusionError(f"bad shape point {point!r}: {v!r} is not an integer") from None


Handler = Callable[[argparse.Namespace], int]

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
