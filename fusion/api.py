"""The Python entry points: fuse a model given as a ModelProto, a path or a gs.Graph."""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path
from typing import Sequence, Union

import onnx
import onnx_graphsurgeon as gs

from .passes import defaults
from .ir import model_io
from .rewrite import specs
from .passes import driver  # `passes` is the keyword that names the passes
from .errors import FusionError
from .passes.driver import PassResult

log = logging.getLogger(__name__)

ModelLike = Union[str, os.PathLike, onnx.ModelProto, gs.Graph]
NORM_PASSES = ("layernorm", "rmsnorm")


def fuse(
    model: ModelLike,
    passes: Sequence[str] | None = None,
    *,
    target: str = "plugin",
    functions: bool = True,
    validate: bool = True,
    base_dir: str | None = None,
    inplace: bool = False,
    assume_constant_initializers: bool = False,
    passes_: Sequence[str] | None = None,
) -> onnx.ModelProto | gs.Graph:
    """Fuse every supported pattern of the selected passes; returns the same kind it was given.

    ``passes``: None runs the target's defaults (fusion/passes/defaults.py), which for target
    "plugin" is none: our plugins made measured TensorRT engines slower, so name the passes
    (``passes=["layernorm", "rmsnorm", "gemm"]``) or let :func:`fusion.tune` choose.

    ``target``: "plugin" (this project's plugins, default), "trt" (TensorRT's shipped
    plugins) or "onnx" (standard ops).  ``functions``: attach a model-local ONNX function to
    each custom op so onnxruntime can run the fused model; a chain whose node no function can
    define is then left as it is (a near-miss says why).  ``functions=False`` asks for
    plugin-only output, which onnxruntime cannot run (a warning says so).  ``inplace``: edit
    the given ModelProto instead of a copy (saves copying the weights).  A fused model that
    fails onnx.checker while the input passes raises ``InternalError``; the given ModelProto is
    then left as it was, ``inplace`` or not.  A path comes back as a ModelProto
    with its external data loaded, as ``onnx.load`` would; use :func:`fuse_file` to keep
    weights on disk.  An unmodified model is returned as is.

    ``assume_constant_initializers``: an initializer that is also listed as a graph input
    (IR >= 4) may be fed another value by the caller, so by default no rule bakes its value
    (such chains are near-misses saying so).  True treats them as constants, as onnxruntime's
    remove_initializer_from_input tool does, and a fused model then no longer lists them as inputs.
    """
    result = run(
        model, _renamed(passes, passes_, "passes_"), target=target, functions=functions, validate=validate, base_dir=base_dir, inplace=inplace,
        assume_constant_initializers=assume_constant_initializers,
    )
    return result.model


def fuse_layernorm(
    model: ModelLike, *, target: str = "plugin", rms: bool = True, passes: Sequence[str] | None = None, **kwargs
) -> onnx.ModelProto | gs.Graph:
    """Fuse decomposed LayerNorm (and, unless ``rms=False``, RMSNorm) chains.  See :func:`fuse`."""
    return fuse(model, passes=_within(passes, NORM_PASSES if rms else ("layernorm",)), target=target, **kwargs)


def fuse_gemm(model: ModelLike, *, target: str = "plugin", passes: Sequence[str] | None = None, **kwargs) -> onnx.ModelProto | gs.Graph:
    """Fuse Gemm and MatMul+Add (+activation) into fully-connected nodes.  See :func:`fuse`."""
    return fuse(model, passes=_within(passes, ("gemm",)), target=target, **kwargs)


def inspect(
    model: ModelLike,
    passes: Sequence[str] | None = None,
    *,
    target: str = "plugin",
    base_dir: str | None = None,
    assume_constant_initializers: bool = False,
    passes_: Sequence[str] | None = None,
) -> PassResult:
    """Dry run: what would fuse, and for each near-miss the reason it does not."""
    return run(
        model, _renamed(passes, passes_, "passes_"), target=target, dry_run=True, base_dir=base_dir, assume_constant_initializers=assume_constant_initializers
    )


def run(
    model: ModelLike,
    passes: Sequence[str] | None = None,
    *,
    target: str = "plugin",
    functions: bool = True,
    validate: bool = True,
    dry_run: bool = False,
    base_dir: str | None = None,
    inplace: bool = False,
    assume_constant_initializers: bool = False,
    pass_names: Sequence[str] | None = None,
) -> PassResult:
    """Fuse and return the full result (model, fusions, near-misses, warnings)."""
    rules = defaults.rules_for(_renamed(passes, pass_names, "pass_names"), target)  # none named: the target's defaults
    frozen = assume_constant_initializers
    if isinstance(model, gs.Graph):
        proto = gs.export_onnx(model)
        result = driver.run(
            proto, rules, target, base_dir=base_dir, functions=functions, validate=validate, dry_run=dry_run,
            assume_constant_initializers=frozen,
        )
        if result.modified:
            result.model = gs.import_onnx(result.model)
        else:
            result.model = model
        return result
    if isinstance(model, onnx.ModelProto):
        return driver.run(
            model, rules, target, base_dir=base_dir, functions=functions, validate=validate, dry_run=dry_run, inplace=inplace,
            assume_constant_initializers=frozen,
        )
    loaded = model_io.load(model)
    result = driver.run(
        loaded.proto, rules, target, base_dir=loaded.base_dir, functions=functions, validate=validate, dry_run=dry_run,
        inplace=True, assume_constant_initializers=frozen,
    )
    if not dry_run and model_io.external_tensors(result.model):
        onnx.load_external_data_for_model(result.model, loaded.base_dir)
    return result


def fuse_file(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    passes: Sequence[str] | None = None,
    *,
    target: str = "plugin",
    functions: bool = True,
    validate: bool = True,
    assume_constant_initializers: bool = False,
    pass_names: Sequence[str] | None = None,
) -> PassResult:
    """Fuse the model at ``src`` into ``dst``; weights stay on disk and stream to dst's data file.

    ``dst`` may be ``src``: the output is written to a temporary file and renamed over it.
    """
    rules = defaults.rules_for(_renamed(passes, pass_names, "pass_names"), target)  # none named: the target's defaults
    loaded = model_io.load(src)
    result = driver.run(
        loaded.proto,
        rules,
        target,
        base_dir=loaded.base_dir,
        functions=functions,
        validate=validate,
        inplace=True,  # the proto was just read: no one else holds it
        reload=lambda: model_io.load(src).proto,
        assume_constant_initializers=assume_constant_initializers,
    )
    same = Path(src).resolve() == Path(dst).resolve()
    model_io.save(result.model, dst, source_dir=loaded.base_dir, in_place=same)
    return result


def strip_functions(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy without the model-local functions this library attaches to its custom ops."""
    ours = {(s.domain, s.op_type) for s in specs.SPECS}
    out = onnx.ModelProto()
    out.CopyFrom(model)
    keep = [f for f in out.functions if (f.domain, f.name) not in ours]
    del out.functions[:]
    out.functions.extend(keep)
    return out


def _renamed(passes: Sequence[str] | None, old: Sequence[str] | None, old_name: str) -> Sequence[str] | None:
    """``passes``, or the value given under its old keyword (deprecated; removed in the next release)."""
    if old is None:
        return passes
    warnings.warn(f"{old_name}= is deprecated; use passes=", DeprecationWarning, stacklevel=3)
    return passes if passes is not None else old


def _within(passes: Sequence[str] | None, allowed: Sequence[str]) -> Sequence[str]:
    """The passes a ``fuse_*`` helper runs: ``passes`` if given, which must be among its own."""
    if passes is None:
        return allowed
    extra = [p for p in passes if p not in allowed]
    if extra:
        raise FusionError(f"pass {extra[0]!r} is not one of this function's ({', '.join(allowed)})")
    return list(passes)
