"""Fuse decomposed LayerNorm/RMSNorm and fully-connected ONNX subgraphs into TensorRT plugin nodes.

    import onnx, fusion
    fused = fusion.fuse_layernorm(onnx.load("bert.onnx"))
    report = fusion.verify("bert.onnx", fused)
"""

from .api import fuse, fuse_file, fuse_gemm, fuse_layernorm, inspect, run, strip_functions
from .errors import FusionError
from .passes.driver import Fusion, NearMiss, PassResult
from .rewrite.specs import SPECS

# The function; its module is fusion.compare.verify (polygraphy itself is imported lazily).
from .compare.verify import VerifyReport, verify  # noqa: E402

from .deployment import DeployResult, deploy  # noqa: E402 - TensorRT itself is imported lazily

__version__ = "0.1.0"


def build_engine(*args, **kwargs):
    """Build a TensorRT engine (profiles, plugins, precision); see :func:`fusion.trt.build.build_engine`."""
    from .trt.build import build_engine as _build_engine

    return _build_engine(*args, **kwargs)


def tune(*args, **kwargs):
    """Fuse keeping only what makes the TensorRT engine faster; see :func:`fusion.tuning.tune`."""
    from .tuning import tune as _tune

    return _tune(*args, **kwargs)


__all__ = [
    "Fusion",
    "FusionError",
    "NearMiss",
    "PassResult",
    "SPECS",
    "VerifyReport",
    "DeployResult",
    "build_engine",
    "deploy",
    "fuse",
    "fuse_file",
    "fuse_gemm",
    "fuse_layernorm",
    "inspect",
    "run",
    "strip_functions",
    "tune",
    "verify",
]
