"""Command line: one subcommand per job.

    python -m fusion fuse model.onnx -o fused.onnx        # or --dry-run
    python -m fusion verify model.onnx fused.onnx
    python -m fusion list
    python -m fusion plugins build | check LIB
    python -m fusion docs [--check]                       # the README's generated tables
    python -m fusion build fused.onnx -o model.engine --profile ...  (needs TensorRT)
    python -m fusion deploy model.onnx -o OUTDIR --profile ...      (all of it, needs TensorRT)

Options mean the same in every subcommand (fusion/options.py): --profile takes ranges,
--shapes takes points.

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

from .. import options
from ..errors import FusionError
from .parser import make_parser

log = logging.getLogger("fusion")


# -- subcommands ------------------------------------------------------------------------


def cmd_fuse(args: argparse.Namespace) -> int:
    from .. import api
    from ..passes import text as report

    if args.tune:  # build and time engines: keep what makes them faster (fusion/tuning.py)
        from ..tuning import run_cli

        return run_cli(args)
    passes = options.passes(args)
    if args.report:  # before anything is written: a bad report path must not cost the model
        from ..report.html import check_report_path  # noqa: PLC0415

        check_report_path(args.report, [p for p in (args.model, args.output) if p])
    if args.dry_run:
        result = api.inspect(args.model, passes, target=args.target, assume_constant_initializers=args.freeze_initializers)
        print(report.to_json(result) if args.json else report.text(result, dry_run=True))
        if args.report:
            from ..report.html import write_report  # noqa: PLC0415 - optional, heavier imports

            write_report(args.model, None, result, args.report)  # no fused model: verify is skipped
        return 0
    if not args.output:
        raise FusionError("fuse needs -o OUTPUT (or --dry-run)")
    with contextlib.ExitStack() as keep:
        original = args.model
        if args.report and _same_file(args.model, args.output):
            # In place: the report compares with (and draws) the original, so keep it.
            from ..report.html import snapshot  # noqa: PLC0415

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
            from ..report.html import write_report  # noqa: PLC0415 - optional, heavier imports

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
    from ..compare.verify import verify

    kwargs = {}
    if args.trt:
        kwargs = options.engine_options(args)
        kwargs["profiles"] = options.profiles(args)
        kwargs["latency"] = not args.no_latency
    rep = verify(
        args.original,
        args.fused,
        extra_checks=options.extra_checks(args.extra_checks),
        shapes=options.shape_points(args.shapes),
        atol=args.atol,
        rtol=args.rtol,
        seed=args.seed,
        backend="trt" if args.trt else "onnxruntime",
        **kwargs,
    )
    print(json.dumps(rep.to_dict(), indent=2) if args.json else rep.table())
    return 0 if rep.passed else 1


# The demo names its passes: with none named the plugin target fuses nothing (fusion/passes/defaults.py).
DEMO_PASSES = ("layernorm", "rmsnorm", "gemm")


def cmd_demo(args: argparse.Namespace) -> int:
    """Fuse the embedded example models, verify them, and say where the results are."""
    from importlib import resources

    from .. import api
    from ..passes import text as report
    from ..passes.defaults import fuses_nothing_by_default, off_reason
    from ..compare.verify import verify

    out_dir = Path(args.output or "fusion-demo")
    out_dir.mkdir(parents=True, exist_ok=True)
    examples = resources.files("fusion") / "examples"
    passes = list(DEMO_PASSES)
    print(f"target {args.target}, passes named: {', '.join(passes)}")
    off = [p for p in passes if off_reason(args.target, p)]
    if off:
        left = "fuses nothing" if fuses_nothing_by_default(args.target) else f"leaves {', '.join(off)} out"
        print(f"note: target {args.target} {left} unless passes are named: whole TensorRT engines measured slower "
              "with these plugins (fusion/passes/defaults.py); `python -m fusion fuse MODEL -o OUT --tune --profile "
              "...` keeps only the fusions that make a model's engine faster")  # fmt: skip
    ok = True
    for name in ("bert_tiny", "llama_tiny"):
        with resources.as_file(examples / f"{name}.onnx") as src:
            dst = out_dir / f"{name}.fused.onnx"
            print(f"== {name}: {src.name} -> {dst}")
            result = api.fuse_file(src, dst, passes, target=args.target)
            print(report.text(result))
            rep = verify(src, dst)
            print(rep.table())
            ok &= rep.passed
    return 0 if ok else 1


def cmd_list(args: argparse.Namespace) -> int:
    from ..rewrite import specs
    from ..patterns import RULES

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
    from ..plugins import library as plugin_lib

    lib = plugin_lib.build_library(Path(args.output) if args.output else None, archs=args.arch or ["sm_90"],
                                   trt=args.trt, tensorrt_include=args.tensorrt_include)  # fmt: skip
    print(lib)
    return 0


def cmd_plugins_check(args: argparse.Namespace) -> int:
    from ..plugins import library as plugin_lib

    problems = plugin_lib.check_library(Path(args.library))
    if problems:
        for p in problems:
            print(f"mismatch: {p}")
        return 1
    print(f"{args.library}: every creator matches its spec")
    return 0


def cmd_docs(args: argparse.Namespace) -> int:
    from .. import docs

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
    from ..trt.build import build_engine  # noqa: PLC0415 - TensorRT is optional

    built = build_engine(args.model, shapes=options.profiles(args), out=args.output, **options.engine_options(args))
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


def cmd_deploy(args: argparse.Namespace) -> int:
    from ..deployment import deploy, stderr_progress  # noqa: PLC0415 - TensorRT is optional

    result = deploy(
        args.model,
        args.output,
        profile=options.profiles(args),
        target=args.target,
        passes=options.passes(args),
        functions=not args.no_functions,
        validate=not args.no_validate,
        freeze_initializers=args.freeze_initializers,
        tune=args.tune,
        latency=not args.no_latency,
        atol=args.atol,
        rtol=args.rtol,
        seed=args.seed,
        progress=stderr_progress,
        **options.engine_options(args),
    )
    print(json.dumps(result.to_dict(), indent=2) if args.json else result.text())
    return 0 if result.passed else 1


def _handler(func):
    """A handler the parser names as a string (so parser.py imports no handler)."""
    return globals()[func] if isinstance(func, str) else func


def main(argv: Sequence[str] | None = None) -> int:
    parser = make_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    for note in options.deprecation_warnings(args):
        log.warning("%s", note)
    try:
        return int(_handler(args.func)(args) or 0)
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


Handler = Callable[[argparse.Namespace], int]

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
