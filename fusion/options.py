"""Command-line option groups, defined once and added to each subcommand that takes them.

One meaning per flag everywhere (issue 15):

* ``--profile RANGE...``: an optimization profile, min/opt/max per input or dim
  (``input_ids:1x1,8x128,32x512`` or ``batch=1,8,32 seq=1,128,512``); repeat it for more profiles.
* ``--shapes POINT...``: shape points to run at (``batch=2,seq=16`` or ``input_ids:2x16``).
* ``--plugins``, ``--precision``, ``--tactic-sources``, ``--timing-cache``: how an engine is built.

Old spellings keep working for one release, with a warning: ``build --shapes RANGE`` (now
``--profile``) and ``--no-tactic-sources`` (now ``--tactic-sources none``).  Each group is a
function that adds an argument group and a function that reads it back from the namespace.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from typing import Any

from .errors import FusionError

log = logging.getLogger("fusion")

TARGETS = ("plugin", "trt", "onnx")
PRECISIONS = ("fp32", "tf32", "fp16")
TACTIC_SOURCE_NAMES = ("cublas", "cublas_lt", "cudnn", "edge_mask_convolutions", "jit_convolutions")
PROFILE_HELP = (
    "an optimization profile: input:MIN,OPT,MAX shapes (input_ids:1x1,8x128,32x512) or dim=MIN,OPT,MAX "
    "(batch=1,8,32); inputs sharing a dim name share its range; repeat the option for more profiles"
)


# -- deprecated spellings ------------------------------------------------------------------


class _Deprecated(argparse.Action):
    """An old spelling: stores what the new one would, and leaves a warning on the namespace
    (printed once logging is set up; see :func:`deprecation_warnings`)."""

    def __init__(self, option_strings, dest, *, new: str, store: Any = None, append: bool = False, **kw):
        self.new, self.store, self.append = new, store, append
        super().__init__(option_strings, dest, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        if self.append:
            got = list(getattr(namespace, self.dest, None) or [])
            got.append(values)
            setattr(namespace, self.dest, got)
        else:
            setattr(namespace, self.dest, self.store)
        notes = list(getattr(namespace, "_deprecated", []))
        note = f"{option_string} is deprecated and will be removed in the next release: use {self.new}"
        if note not in notes:
            notes.append(note)
        namespace._deprecated = notes


def deprecation_warnings(args: argparse.Namespace) -> list[str]:
    """The warnings the old spellings on this command line left (logged by the CLI)."""
    return list(getattr(args, "_deprecated", []))


# -- fusion ----------------------------------------------------------------------------------


def add_fusion_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("fusion")
    g.add_argument("--passes", help="comma-separated passes (default: those the target runs unless named: none for "
                   "plugin, rmsnorm for trt, all but skipnorm for onnx; fusion/passes/defaults.py; see `list`)")  # fmt: skip
    g.add_argument("--target", choices=TARGETS, default="plugin", help="what fused nodes become (default: plugin)")
    g.add_argument("--no-functions", action="store_true", help="do not attach ONNX function bodies to custom ops")
    g.add_argument("--no-validate", action="store_true", help="skip onnx.checker (full) on the output")
    g.add_argument(
        "--freeze-initializers",
        action="store_true",
        help="treat initializers listed as graph inputs as constants; the output stops listing them as inputs",
    )


def passes(args: argparse.Namespace) -> list[str] | None:
    return split(args.passes) if args.passes else None


# -- shapes: points and ranges ---------------------------------------------------------------


def add_shape_args(g) -> None:
    """``--shapes POINT...``: where to run (verify)."""
    g.add_argument(
        "--shapes",
        nargs="+",
        metavar="POINT",
        help="shape points, each 'dim=value,...' or 'input:AxBxC,...' (default: every dynamic dim 1, 3, 8)",
    )


def add_profile_args(g, *, legacy_shapes: bool = False, help_suffix: str = "") -> None:
    """``--profile RANGE...`` (repeatable); ``legacy_shapes``: ``--shapes`` also means a range
    here, as ``build`` had it (deprecated)."""
    g.add_argument("--profile", nargs="+", action="append", metavar="RANGE", help=PROFILE_HELP + help_suffix)
    if legacy_shapes:
        g.add_argument("--shapes", dest="profile", nargs="+", metavar="RANGE", action=_Deprecated, append=True,
                       new="--profile (--shapes takes shape points, as in verify)", help=argparse.SUPPRESS)  # fmt: skip


def profiles(args: argparse.Namespace) -> list[dict] | None:
    """Each --profile occurrence is one optimization profile."""
    groups: Sequence[Sequence[str]] | None = getattr(args, "profile", None)
    if not groups:
        return None
    from .trt.profiles import parse_profile  # noqa: PLC0415

    return [parse_profile(g) for g in groups]


def shape_points(points: Sequence[str] | None) -> list[dict] | None:
    """'batch=2,seq=16' or 'input_ids:2x16,mask:2x16' -> [{...}]"""
    if not points:
        return None
    out = []
    for point in points:
        d: dict = {}
        for item in split(point):
            if "=" in item:
                k, v = item.split("=", 1)
                d[k.strip()] = _int(v, point)
            elif ":" in item:
                k, v = item.rsplit(":", 1)
                d[k.strip()] = [_int(x, point) for x in v.lower().split("x")]
            else:
                raise FusionError(f"bad shape point {point!r}: use dim=value or input:AxBxC (ranges are --profile)")
        out.append(d)
    return out


def _int(v: str, point: str) -> int:
    try:
        return int(v)
    except ValueError:
        raise FusionError(f"bad shape point {point!r}: {v!r} is not an integer") from None


# -- verification ----------------------------------------------------------------------------


def add_tolerance_args(g) -> None:
    g.add_argument("--atol", type=float, help="absolute tolerance for every output (default: by dtype)")
    g.add_argument("--rtol", type=float, help="relative tolerance for every output (default: by dtype)")
    g.add_argument("--seed", type=int, default=0, help="seed for random inputs")


def add_extra_checks_arg(g) -> None:
    g.add_argument(
        "--extra-checks",
        metavar="LIST",
        help="comma-separated extra checks beyond random inputs: 'initializers fed', 'zero-size dim', "
        "'large mean', 'onnxruntime optimized' (the fused model on onnxruntime's default, optimizing session), "
        "or none / all (default: fusion.compare.verify.DEFAULT_EXTRA_CHECKS)",
    )


def extra_checks(text: str | None):
    from .compare.verify import EXTRA_CHECKS  # noqa: PLC0415

    if text is None:
        return True
    if text.strip().lower() == "none":
        return False
    if text.strip().lower() == "all":
        return list(EXTRA_CHECKS)
    return split(text)  # (verify names the unknown ones)


# -- engine building -------------------------------------------------------------------------


def add_engine_args(g) -> None:
    g.add_argument("--plugins", nargs="+", default=[], metavar="LIB", help="plugin libraries to load before parsing")
    g.add_argument("--precision", choices=PRECISIONS, default="fp32", help="fp32 (TF32 off), tf32 or fp16 (default: fp32)")
    g.add_argument(
        "--tactic-sources",
        metavar="LIST",
        help=f"comma-separated tactic sources TensorRT may use ({', '.join(TACTIC_SOURCE_NAMES)}, as the installed "
        "TensorRT has them), or none (default: TensorRT's default); e.g. cublas,cublas_lt where cuDNN is absent",
    )
    g.add_argument("--no-tactic-sources", dest="tactic_sources", nargs=0, action=_Deprecated, store="none",
                   new="--tactic-sources none", help=argparse.SUPPRESS)  # fmt: skip
    g.add_argument("--timing-cache", metavar="FILE", help="TensorRT timing cache to read and update")


def tactic_sources(text: str | None) -> list[str] | None:
    """'cublas,cublas_lt' -> ['cublas', 'cublas_lt']; 'none' -> []; None -> None (TensorRT's default).
    The names are checked against the installed TensorRT when the engine is built."""
    if text is None:
        return None
    names = split(text)  # (as spelled: TensorRT's names are upper case, matched without case)
    lower = [n.lower() for n in names]
    if lower == ["none"]:
        return []
    if not names or "none" in lower:
        raise FusionError(f"--tactic-sources {text!r}: give comma-separated names ({', '.join(TACTIC_SOURCE_NAMES)}) or none")
    return names


def engine_options(args: argparse.Namespace) -> dict:
    """Build options shared by `build`, `verify --trt` and `deploy`."""
    opts: dict = {"plugins": args.plugins or [], "precision": args.precision}
    sources = tactic_sources(args.tactic_sources)
    if sources is not None:
        opts["tactic_sources"] = sources
    if args.timing_cache:
        opts["timing_cache"] = args.timing_cache
    return opts


def add_latency_arg(g, help_text: str) -> None:
    g.add_argument("--no-latency", action="store_true", help=help_text)


# -- output ----------------------------------------------------------------------------------


def add_output_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def split(s: str) -> list[str]:
    return [p.strip() for p in s.split(",") if p.strip()]
