"""The argument parser of `python -m fusion`; names its handlers (fusion.cli.commands) as strings."""

from __future__ import annotations

import argparse

from .. import options


TARGETS = options.TARGETS


# -- argument groups: defined once in fusion/options.py, shared by the subcommands ---------

_add_fusion_args = options.add_fusion_args


_add_output_args = options.add_output_args


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
    _add_fusion_args(p)
    _add_output_args(p)
    from ..tuning import add_cli_args  # noqa: PLC0415

    add_cli_args(p)
    p.set_defaults(func="cmd_fuse")

    p = sub.add_parser("verify", help="compare a fused model with the original")
    p.add_argument("original")
    p.add_argument("fused")
    p.add_argument("--trt", action="store_true", help="run the fused model on TensorRT instead of onnxruntime")
    g = p.add_argument_group("TensorRT (with --trt)")
    options.add_profile_args(g, help_suffix="; inputs default to each profile's min/opt/max (default profile: spans "
                             "the verify shapes)")  # fmt: skip
    options.add_engine_args(g)
    options.add_latency_arg(g, "skip building the original's engine and timing both engines (fused/unfused speed-up per shape)")
    g = p.add_argument_group("verification")
    options.add_shape_args(g)
    options.add_tolerance_args(g)
    options.add_extra_checks_arg(g)
    _add_output_args(p)
    p.set_defaults(func="cmd_verify")

    p = sub.add_parser("demo", help="fuse and verify the embedded example models (a tiny BERT and LLaMA)")
    p.add_argument("-o", "--output", help="directory for the fused models (default: ./fusion-demo)")
    p.add_argument("--target", choices=TARGETS, default="plugin")
    p.set_defaults(func="cmd_demo")

    p = sub.add_parser("list", help="patterns, targets and plugin specs")
    _add_output_args(p)
    p.set_defaults(func="cmd_list")

    p = sub.add_parser("plugins", help="build or check the plugin library")
    psub = p.add_subparsers(dest="plugins_command", required=True, metavar="ACTION")
    b = psub.add_parser("build", help="compile plugin_src into one shared library")
    b.add_argument("-o", "--output", help="output directory (default: plugin_build)")
    b.add_argument("--arch", nargs="+", help="GPU architectures (default: sm_90)")
    b.add_argument("--trt", type=int, choices=(10, 8), default=10,
                   help="10: IPluginV3 libfusion_plugins.so (default); 8: IPluginV2DynamicExt libfusion_plugins_trt8.so")
    b.add_argument("--tensorrt-include", metavar="DIR",
                   help="headers of the TensorRT to build for (else $TENSORRT_INCLUDE; --trt 8 without: our own)")
    b.set_defaults(func="cmd_plugins_build")
    c = psub.add_parser("check", help="compare a library's creators with the plugin specs (either flavour, no GPU needed)")
    c.add_argument("library")
    c.set_defaults(func="cmd_plugins_check")

    p = sub.add_parser("docs", help="regenerate the README's tables from the specs, rules and CLI (or --check)")
    p.add_argument("--check", action="store_true", help="exit 1 if the README's generated tables are out of date")
    p.add_argument("--readme", help="README path (default: the checkout's README.md)")
    p.set_defaults(func="cmd_docs")

    p = sub.add_parser("build", help="build a TensorRT engine (needs TensorRT)")
    _add_build_args(p)
    p.set_defaults(func="cmd_build")

    p = sub.add_parser("deploy", help="fuse, build the engine, verify it at the profile's min/opt/max, time it "
                       "against the unfused engine, report (needs TensorRT)")  # fmt: skip
    _add_deploy_args(p)
    p.set_defaults(func="cmd_deploy")
    return parser


def _add_build_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model")
    p.add_argument("-o", "--output", required=True, help="engine file")
    g = p.add_argument_group("TensorRT")
    options.add_profile_args(g, legacy_shapes=True)
    options.add_engine_args(g)
    _add_output_args(p)


def _add_deploy_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="input .onnx")
    p.add_argument("-o", "--output", required=True, metavar="OUTDIR",
                   help="directory for NAME.fused.onnx, NAME.fused.engine, NAME.report.html and NAME.deploy.json "
                   "(made if absent; written in a temporary folder beside it, then moved)")  # fmt: skip
    _add_fusion_args(p)
    g = p.add_argument_group("TensorRT")
    options.add_profile_args(g, help_suffix=" (required where the model has dynamic inputs)")
    options.add_engine_args(g)
    g.add_argument("--tune", action="store_true", help="keep only the fusions that make the engine faster (fusion.tune)")
    options.add_latency_arg(g, "skip building the unfused engine and timing both")
    g = p.add_argument_group("verification (at each profile's min, opt and max)")
    options.add_tolerance_args(g)
    _add_output_args(p)
