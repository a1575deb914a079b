"""TensorRT engines: build from ONNX with optimization profiles and plugins; inspect them.

    built = fusion.build_engine("fused.onnx", shapes={"batch": (1, 8, 32), "seq": (1, 128, 512)},
                                plugins=["libmy_plugins.so"], precision="fp16", out="model.engine")

Written against TensorRT's Python API as 8.5 through 10.x have it (explicit batch, name-based
tensor API, ``build_serialized_network``); the few calls that differ are chosen by feature,
not version.  Running engines for ``fusion.verify(..., backend="trt")`` is in ``trt_run``.
"""

from __future__ import annotations

import ctypes
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import onnx

from ..ir import model_io
from ..errors import EngineBuildError
from .inspect import (
    PluginLayer,
    engine_plugin_count,
    network_plugin_layers,
    parser_errors,
)
from .profiles import InputInfo, ProfileShapes, derive_profiles, model_inputs

log = logging.getLogger(__name__)

PRECISIONS = ("fp32", "tf32", "fp16")
NOT_INSTALLED = "TensorRT is not installed: pip install tensorrt (or run where it is)"
_LOADED_PLUGINS: set[str] = set()
_PLUGIN_LOGGER = None


def import_trt():
    """The ``tensorrt`` module, or EngineBuildError saying it is absent."""
    try:
        import tensorrt as trt
    except ImportError as e:
        raise EngineBuildError(NOT_INSTALLED) from e
    return trt


def trt_version() -> str | None:
    try:
        return import_trt().__version__
    except EngineBuildError:
        return None


def _major(trt) -> int:
    return int(str(trt.__version__).split(".")[0])


_WARNING, _INFO = 2, 3  # ILogger.Severity values


_LOGGER_CLASS = None


def make_logger(trt):
    """A TensorRT logger that keeps what was said at WARNING and worse, to quote in errors."""
    global _LOGGER_CLASS
    if _LOGGER_CLASS is None:

        class Logger(trt.ILogger):
            def __init__(self):
                trt.ILogger.__init__(self)
                self.messages: list[tuple[int, str]] = []

            def log(self, severity, msg):
                level = int(severity)  # INTERNAL_ERROR 0, ERROR 1, WARNING 2, INFO 3, VERBOSE 4
                if level <= _WARNING:
                    self.messages.append((level, msg))
                    (log.warning if level == _WARNING else log.error)("TensorRT: %s", msg)
                elif level == _INFO:
                    log.debug("TensorRT: %s", msg)

            def errors(self) -> list[str]:
                return [m for level, m in self.messages if level < _WARNING]

        _LOGGER_CLASS = Logger
    return _LOGGER_CLASS()


def load_plugins(paths: Sequence[str | os.PathLike] = ()) -> None:
    """Load plugin libraries before parsing, so the parser's fallback importer finds their creators.

    TensorRT's own plugins (libnvinfer_plugin) are registered first.  TensorRT >= 10 loads a
    library through the plugin registry (it calls the library's ``getCreators`` /
    ``getPluginCreators``); older ones dlopen it, which runs its static creator registration.
    """
    trt = import_trt()
    global _PLUGIN_LOGGER
    if _PLUGIN_LOGGER is None:  # TensorRT keeps the logger: it must live as long as the process
        _PLUGIN_LOGGER = make_logger(trt)
        trt.init_libnvinfer_plugins(_PLUGIN_LOGGER, "")
    for p in paths:
        path = os.path.abspath(os.fspath(p))
        if path in _LOADED_PLUGINS:
            continue
        if not os.path.isfile(path):
            raise EngineBuildError(f"plugin library {p} does not exist")
        registry = trt.get_plugin_registry()
        if hasattr(registry, "load_library"):
            if registry.load_library(path) is None:
                raise EngineBuildError(f"TensorRT could not load plugin library {p} (see the log above)")
        else:
            try:
                lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            except OSError as e:
                raise EngineBuildError(f"cannot load plugin library {p}: {e}") from None
            if hasattr(lib, "getCreators") and not hasattr(lib, "getPluginCreators"):
                raise EngineBuildError(
                    f"{p} exports IPluginV3 creators (getCreators), which need TensorRT >= 10; this is {trt.__version__}"
                )
        _LOADED_PLUGINS.add(path)


@dataclass
class BuiltEngine:
    """A serialized engine and what was learned building it."""

    engine: bytes
    profiles: list[ProfileShapes]
    inputs: list[InputInfo]
    trt_version: str
    precision: str
    plugin_layers: list[PluginLayer] = field(default_factory=list)  # from the parsed network
    engine_plugin_layers: int | None = None  # from the engine inspector, where it reports layer types
    network_layers: int = 0
    build_s: float = 0.0
    path: str | None = None

    def summary(self) -> dict[str, Any]:
        return {
            "trt_version": self.trt_version,
            "precision": self.precision,
            "profiles": [{n: [list(s) for s in r] for n, r in p.ranges.items()} for p in self.profiles],
            "network_layers": self.network_layers,
            "plugin_layers": [f"{p.name} ({p.plugin})" for p in self.plugin_layers],
            "engine_plugin_layers": self.engine_plugin_layers,
            "build_s": round(self.build_s, 3),
            "engine_bytes": len(self.engine),
            "path": self.path,
        }


def build_engine(
    model: Any,
    shapes: Any = None,
    plugins: Sequence[str | os.PathLike] = (),
    precision: str = "fp32",
    out: str | os.PathLike | None = None,
    *,
    tactic_sources: Sequence[str] | int | None = None,
    workspace_mb: int | None = None,
    timing_cache: str | os.PathLike | None = None,
) -> BuiltEngine:
    """Build a TensorRT engine from an ONNX model (path, bytes or ModelProto).

    ``shapes``: the optimization profile(s), see :mod:`fusion.trt.profiles` (a mapping of input or
    dim names to ranges, or a list of them).  ``plugins``: libraries loaded before parsing.
    ``precision``: "fp32" (TF32 off: fp32 means fp32), "tf32" or "fp16".  ``tactic_sources``:
    None keeps TensorRT's defaults; [] or 0 allows none (no cuBLAS/cuDNN tactics); else names
    of ``trt.TacticSource`` members (cublas, cublas_lt, cudnn, ...: see :func:`tactic_source_names`),
    whose libraries are checked to load first (:func:`check_tactic_libraries`).  ``timing_cache``: a file read before and written after
    the build (speeds up building many similar engines).  ``out``: also write the engine there.
    """
    if precision not in PRECISIONS:
        raise EngineBuildError(f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
    trt = import_trt()
    proto, source = _load(model)
    logger = make_logger(trt)
    load_plugins(plugins)
    t0 = time.perf_counter()
    try:
        builder = trt.Builder(logger)
    except Exception:  # noqa: BLE001 - pybind11 raises when the factory returns nullptr
        builder = None
    if builder is None:
        said = [m for _, m in logger.messages]  # at this point TensorRT says why as a warning
        raise EngineBuildError("TensorRT could not create a builder (is a CUDA GPU visible?)" + (f": {said[-1]}" if said else ""))
    network = builder.create_network(_network_flags(trt))
    parser = trt.OnnxParser(network, logger)
    ok = parser.parse_from_file(source) if isinstance(source, str) else parser.parse(source)
    if not ok:
        raise EngineBuildError(parser_errors(trt, parser, proto, logger))

    shape_tensors = {network.get_input(i).name for i in range(network.num_inputs) if network.get_input(i).is_shape_tensor}
    inputs = model_inputs(proto, shape_tensors)
    profiles = derive_profiles(inputs, shapes)
    config = builder.create_builder_config()
    _configure(trt, config, precision, tactic_sources, workspace_mb)
    check_tactic_libraries(trt, _names(tactic_sources))
    if tactic_sources is None:
        _warn_default_libraries(trt, config)
    for prof in profiles:
        config.add_optimization_profile(_trt_profile(builder, network, prof))
    cache = _timing_cache(config, timing_cache)
    plugin_layers = network_plugin_layers(trt, network)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        # The last error is a generic "Assertion engine != nullptr"; the first says which node and why.
        errors = [e for e in logger.errors() if "engine != nullptr" not in e] or logger.errors()
        raise EngineBuildError("TensorRT could not build the engine" + (f": {errors[0]}" if errors else "")
                               + library_hint(logger.errors(), _names(tactic_sources)))
    engine_bytes = bytes(serialized)
    if cache is not None and timing_cache:
        with open(timing_cache, "wb") as f:
            f.write(memoryview(cache.serialize()))
    built = BuiltEngine(
        engine=engine_bytes,
        profiles=profiles,
        inputs=inputs,
        trt_version=trt.__version__,
        precision=precision,
        plugin_layers=plugin_layers,
        engine_plugin_layers=engine_plugin_count(trt, engine_bytes, logger),
        network_layers=network.num_layers,
        build_s=time.perf_counter() - t0,
    )
    if out is not None:
        _write(out, engine_bytes)
        built.path = os.fspath(out)
    log.info("built engine: %d layers, %d plugin layers, %.1fs", built.network_layers, len(plugin_layers), built.build_s)
    return built


def _names(sources: Any) -> list[str] | None:
    if sources is None or isinstance(sources, int):
        return None
    if isinstance(sources, str):
        return [s.strip().lower() for s in sources.split(",") if s.strip() and s.strip().lower() != "none"]
    return [str(s).lower() for s in sources]


def _write(path: str | os.PathLike, data: bytes) -> None:
    tmp = f"{os.fspath(path)}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as e:
        raise EngineBuildError(f"cannot write the engine to {path}: {e.strerror or e}") from None


def _load(model: Any) -> tuple[onnx.ModelProto, str | bytes]:
    """The model as a proto (for names and dims) and as what the parser reads."""
    if isinstance(model, onnx.ModelProto):
        if model_io.external_tensors(model):
            raise EngineBuildError("a ModelProto with external data cannot be parsed from memory: pass its path")
        return model, model.SerializeToString()
    if isinstance(model, (bytes, bytearray)):
        return onnx.load_from_string(bytes(model)), bytes(model)  # bytes never carry external data
    path = os.fspath(model)
    return model_io.load(path).proto, path


def _network_flags(trt) -> int:
    # Explicit batch: required before TensorRT 10, the only mode (and the flag deprecated) since.
    flag = getattr(trt.NetworkDefinitionCreationFlag, "EXPLICIT_BATCH", None)
    return 1 << int(flag) if flag is not None and _major(trt) < 10 else 0


def _configure(trt, config, precision: str, tactic_sources, workspace_mb: int | None) -> None:
    if precision == "fp16":
        config.set_flag(trt.BuilderFlag.FP16)
    if precision != "tf32" and hasattr(trt.BuilderFlag, "TF32"):
        config.clear_flag(trt.BuilderFlag.TF32)  # TensorRT turns TF32 on by default
    if precision == "tf32":
        config.set_flag(trt.BuilderFlag.TF32)
    if tactic_sources is not None:
        config.set_tactic_sources(tactic_mask(trt, tactic_sources))
    if hasattr(trt, "ProfilingVerbosity"):  # layer types in the engine inspector's report
        config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
    if workspace_mb is not None:
        if hasattr(config, "set_memory_pool_limit"):
            config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, workspace_mb << 20)
        else:  # pragma: no cover - TensorRT < 8.4
            config.max_workspace_size = workspace_mb << 20


def tactic_source_names(trt) -> list[str]:
    """The tactic sources the installed TensorRT knows, lower case (cublas, cublas_lt, cudnn, ...)."""
    members = getattr(trt.TacticSource, "__members__", None)
    names = list(members) if members else [k for k in dir(trt.TacticSource) if k.isupper()]
    return [n.lower() for n in names]


def tactic_mask(trt, sources: Sequence[str] | int) -> int:
    """[] / 0 -> 0 (no tactic sources); names of trt.TacticSource members -> their bit mask."""
    if isinstance(sources, int):
        return sources
    if isinstance(sources, str):
        sources = [s for s in sources.split(",") if s.strip()] if sources.strip().lower() != "none" else []
    mask = 0
    for s in sources:
        name = str(s).strip()
        member = getattr(trt.TacticSource, name.upper(), None)
        if member is None or name.startswith("_"):
            known = ", ".join(tactic_source_names(trt))
            raise EngineBuildError(f"unknown tactic source {name!r}: TensorRT {trt.__version__} has {known} (or none)")
        mask |= 1 << int(member)
    return mask


# Tactic sources that call into a library TensorRT loads at build time: the sonames to try
# (by TensorRT major version), and symbols every real build of the library exports.  A stub
# (the TensorRT 8.5 bundle's libcudnn.so.8 exports only what libnvinfer_plugin links) lacks them.
_TACTIC_LIBRARIES: dict[str, tuple[str, dict[int, tuple[str, ...]], tuple[str, ...]]] = {
    "cublas": ("cuBLAS", {8: ("libcublas.so.11", "libcublas.so.12"), 10: ("libcublas.so.12", "libcublas.so.13")},
               ("cublasGetProperty", "cublasGetCudartVersion")),
    "cublas_lt": ("cuBLASLt", {8: ("libcublasLt.so.11", "libcublasLt.so.12"),
                               10: ("libcublasLt.so.12", "libcublasLt.so.13")},
                  ("cublasLtGetVersion", "cublasLtGetCudartVersion")),
    "cudnn": ("cuDNN", {8: ("libcudnn.so.8",), 10: ("libcudnn.so.9", "libcudnn.so.8")},
              ("cudnnGetVersion", "cudnnGetCudartVersion")),
}  # fmt: skip


def check_tactic_libraries(trt, sources: Sequence[str] | None) -> None:
    """EngineBuildError naming the library when a requested tactic source's library cannot be
    loaded here or is a stub (checked with ctypes, before a build that would fail on it later)."""
    if not sources or isinstance(sources, int):
        return
    names = [str(s).strip().lower() for s in sources]
    tactic_mask(trt, names)  # unknown names first
    for name in names:
        if name not in _TACTIC_LIBRARIES:
            continue
        problem = _library_problem(name, _major(trt))
        if problem:
            rest = [n for n in names if n != name]
            hint = f"--tactic-sources {','.join(rest)}" if rest else "--tactic-sources none"
            raise EngineBuildError(f"tactic source {name} needs {problem}: install it or leave {name} out ({hint})")


def _library_problem(source: str, major: int) -> str | None:
    """None when one of the source's libraries loads and exports its marker symbols; else why not."""
    label, by_major, markers = _TACTIC_LIBRARIES[source]
    sonames = by_major[10 if major >= 10 else 8]
    why = []
    for soname in sonames:
        lib, error = _load_library(soname, source)
        if lib is None:
            why.append(f"{soname}: {error}")
            continue
        missing = [m for m in markers if not hasattr(lib, m)]
        if not missing:
            return None
        why.append(f"{soname} ({_where(lib)}) is a stub: it lacks {missing[0]}")
    return f"{label}, which is not usable here: " + "; ".join(why)


_PIP_PACKAGES = {"cublas": "nvidia.cublas", "cublas_lt": "nvidia.cublas", "cudnn": "nvidia.cudnn"}


def _load_library(soname: str, source: str):
    """(library, None) or (None, why): by the loader's search path, then from NVIDIA's pip wheel
    (nvidia-cublas-cu12 / nvidia-cudnn-cu12 keep theirs in site-packages/nvidia/*/lib)."""
    try:
        return ctypes.CDLL(soname), None
    except OSError as e:
        error = _short_dlerror(e, soname)
    try:
        import importlib.util

        spec = importlib.util.find_spec(_PIP_PACKAGES[source])
    except (ImportError, ValueError):
        spec = None
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        path = os.path.join(folder, "lib", soname)
        if os.path.exists(path):
            try:
                return ctypes.CDLL(path), None
            except OSError as e:
                return None, _short_dlerror(e, path)
    return None, error


def _warn_default_libraries(trt, config) -> None:
    """TensorRT's default tactic sources are not checked (it may do without one), but a missing
    or stub library among them is worth a warning: the build may fail on it much later."""
    if not hasattr(config, "get_tactic_sources"):
        return
    mask = int(config.get_tactic_sources())
    on = [n for n in tactic_source_names(trt)
          if n in _TACTIC_LIBRARIES and mask >> int(getattr(trt.TacticSource, n.upper())) & 1]  # fmt: skip
    for name in on:
        problem = _library_problem(name, _major(trt))
        if problem:
            rest = ",".join(n for n in on if n != name) or "none"
            log.warning("TensorRT's default tactic sources include %s, which needs %s; if the build fails, "
                        "pass --tactic-sources %s", name, problem, rest)


def _short_dlerror(e: OSError, soname: str) -> str:
    text = str(e)
    return "not found" if "cannot open shared object file" in text or not text else text.replace(f"{soname}: ", "")


def _where(lib) -> str:
    """The file a loaded library came from (the process's memory map), or its name."""
    name = getattr(lib, "_name", "?")
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            for line in f:
                path = line.split(maxsplit=5)[-1].strip() if line.count(" ") >= 5 else ""
                if os.path.basename(path).startswith(os.path.basename(name)):
                    return path
    except OSError:
        pass
    return name


_LIBRARY_WORDS = (("cublaslt", "cublas_lt", "cuBLASLt"), ("cublas_lt", "cublas_lt", "cuBLASLt"),
                  ("cublas", "cublas", "cuBLAS"), ("cudnn", "cudnn", "cuDNN"))  # fmt: skip


def library_hint(messages: Sequence[str], sources: Sequence[str] | None) -> str:
    """When TensorRT's errors name a tactic library: which, and how to build without it."""
    text = " ".join(messages).lower()
    for word, source, label in _LIBRARY_WORDS:
        if word in text:
            rest = [s for s in (sources if sources is not None else ("cublas", "cublas_lt", "cudnn")) if s != source]
            return (f" ({label} failed: the tactic source {source} needs a working {label} library; "
                    f"build without it: --tactic-sources {','.join(rest) or 'none'})")  # fmt: skip
    return ""


def _trt_profile(builder, network, prof: ProfileShapes):
    p = builder.create_optimization_profile()
    names = {network.get_input(i).name: network.get_input(i) for i in range(network.num_inputs)}
    for name, (lo, opt, hi) in prof.ranges.items():
        if name not in names:
            raise EngineBuildError(f"the profile names input {name!r}, which the parsed network lacks")
        if names[name].is_shape_tensor:
            p.set_shape_input(name, lo, opt, hi)
        else:
            p.set_shape(name, lo, opt, hi)
    if hasattr(p, "is_valid") and not p.is_valid:  # pragma: no cover - derive_profiles checks first
        raise EngineBuildError(f"TensorRT rejects the profile {prof.describe()}")
    return p


def _timing_cache(config, path):
    if not hasattr(config, "create_timing_cache"):  # pragma: no cover - TensorRT < 8.0
        return None
    data = b""
    if path and os.path.isfile(path):
        with open(path, "rb") as f:
            data = f.read()
    cache = config.create_timing_cache(data)
    config.set_timing_cache(cache, ignore_mismatch=True)
    return cache
