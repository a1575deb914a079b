"""Fuse decomposed LayerNorm/RMSNorm and fully-connected ONNX subgraphs into TensorRT plugin nodes.

    import onnx, fusion
    fused = fusion.fuse_layernorm(onnx.load("bert.onnx"))
    report = fusion.verify("bert.onnx", fused)
"""

from .api import fuse, fuse_file, fuse_gemm, fuse_layernorm, inspect, run, strip_functions
from .errors import FusionError
from .passes import Fusion, NearMiss, PassResult
from .specs import SPECS

__version__ = "0.1.0"


def verify(*args, **kwargs):
    """Run the original and the fused model on the same inputs; see :func:`fusion.verify.verify`."""
    from .verify import verify as _verify

    return _verify(*args, **kwargs)


__all__ = [
    "Fusion",
    "FusionError",
    "NearMiss",
    "PassResult",
    "SPECS",
    "fuse",
    "fuse_file",
    "fuse_gemm",
    "fuse_layernorm",
    "inspect",
    "run",
    "strip_functions",
    "verify",
]
