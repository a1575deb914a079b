"""Build, describe and check the TensorRT plugin library compiled from plugin_src/.

``build_library`` compiles plugin_src/ (tools/ aside) into one library per TensorRT flavour:
``libfusion_plugins.so`` (``trt=10``, the default: IPluginV3, for TensorRT >= 10) or
``libfusion_plugins_trt8.so`` (``trt=8``: IPluginV2DynamicExt, for TensorRT 8.x, built against
a real installation's headers or, without them, the project's own declarations in
plugin_src/trt8/NvInfer8Abi.h).  Both share the kernels, launchers and the glue's cores;
each has its own thin interface layer.  The
library links cudart statically and opens libcublasLt itself when an FC plugin is first
configured, so it loads on machines without a GPU or cuBLAS.  The creators' names, versions,
namespaces and fields come from ``fusion.rewrite.specs`` through a generated header
(``plugin_src/generated/plugin_specs.h``, rewritten into the build folder at each build).

``check_library`` runs a small describe program: ``fusion_describe`` (tools/describe.cpp)
dlopens a TRT10 library as ``IPluginRegistry::loadLibrary`` does and calls ``getCreators``;
``fusion_describe_trt8`` (tools/describe8.cpp) defines ``getPluginRegistry`` itself so a TRT8
library's load-time registration lands in a recording registry.  Either creates each plugin
from fields, serializes, recreates and clones it, and prints what it saw as JSON; the check
compares that with the specs.  No GPU is needed.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import hashlib
import importlib.util
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from fusion.errors import PluginBuildError
from fusion.rewrite.specs import FieldType, PluginSpec, fusion_specs

LOG = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
LIB_NAME = "libfusion_plugins.so"
DESCRIBE_NAME = "fusion_describe"
HARNESS_NAME = "fusion_harness"
STAMP_NAME = "build.json"
SPEC_HEADER_REL = Path("generated") / "plugin_specs.h"
# Where the creators must say they come from (IVersionedInterface::getInterfaceInfo).
CREATOR_INTERFACE = ("PLUGIN CREATOR_V3ONE", 1, 0)
PLUGIN_INTERFACE = ("PLUGIN", 1, 0)
# Exported from the library; everything else (static cudart included) stays local.
# The launch policies' C entry points (tests compare them with Python's copies).
PLAN_EXPORTS = ("fusion_norm_plan", "fusion_groupnorm_plan", "fusion_groupnorm_device")
EXPORTS = ("getCreators", "setLoggerFinder", *PLAN_EXPORTS)
TRT_VERSIONS = (10, 8)


@dataclass(frozen=True)
class Flavour:
    """One plugin library: the TensorRT interface generation it implements and its files."""

    trt: int  # 10: IPluginV3 (TensorRT >= 10); 8: IPluginV2DynamicExt (TensorRT 8.x)
    lib_name: str
    describe_name: str
    describe_src: str  # under plugin_src/tools
    stamp_name: str
    include_dir: str  # the build folder's generated include dir
    exports: tuple[str, ...]
    # Interface the creators / plugins report: (kind, major); minor follows the headers.
    creator_interface: tuple[str, int]
    plugin_interface: tuple[str, int]
    # Sources under plugin_src/ that belong only to the other flavour's interface layer.
    skip: tuple[str, ...]


# The IPluginV3 interface layer, plugin_src/trt10/ (the TRT8 layer lives in plugin_src/trt8/).
V3_GLUE = ("trt10/PluginV3.cpp", "trt10/entry.cpp")
FLAVOURS = {
    10: Flavour(10, LIB_NAME, DESCRIBE_NAME, "describe.cpp", STAMP_NAME, "include", EXPORTS,
                CREATOR_INTERFACE[:2], PLUGIN_INTERFACE[:2], ("trt8/",)),  # fmt: skip
    8: Flavour(8, "libfusion_plugins_trt8.so", "fusion_describe_trt8", "describe8.cpp", "build_trt8.json",
               "include_trt8", ("fusion_trt8_register", *PLAN_EXPORTS), ("IPluginCreator", 8),
               ("IPluginV2DynamicExt", 8), V3_GLUE),  # fmt: skip
}
# Our own TensorRT 8 declarations, used when no real 8.x headers are given.
TRT8_ABI_HEADER = "trt8/NvInfer8Abi.h"


def flavour(trt: int | str) -> Flavour:
    try:
        return FLAVOURS[int(trt)]
    except (KeyError, ValueError):
        raise PluginBuildError(f"no plugin library for TensorRT {trt!r} (choose one of {list(TRT_VERSIONS)})") from None
CUBLAS_PIP = "nvidia-cublas"  # ships nvidia/cu13/include/cublasLt.h
TRT_HEADERS_PIP = "kernel-lens"  # ships include/tensorrt/NvInfer*.h (TensorRT 10.x, Apache-2.0)
_FLAGS = ("-std=c++17", "-O3", "-Xcompiler=-fPIC,-fvisibility=hidden,-Wall,-Wno-unused-function")


def plugin_src_dir() -> Path:
    """The plugin_src/ folder: $FUSION_PLUGIN_SRC, else the one beside this package."""
    env = os.environ.get("FUSION_PLUGIN_SRC")
    path = Path(env) if env else REPO_ROOT / "plugin_src"
    if not (path / "common").is_dir():
        raise PluginBuildError(f"plugin sources not found at {path} (set FUSION_PLUGIN_SRC)")
    return path


# --------------------------------------------------------------------------- spec header


def _cxx_namespace(op_type: str) -> str:
    """FusedLayerNorm -> fused_layer_norm, FusedRMSNorm -> fused_rms_norm."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", op_type).lower()


def _cxx_string(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_.\- ]*", value):
        raise ValueError(f"spec string {value!r} is not plain ASCII")
    return f'"{value}"'


def field_length(ftype: FieldType) -> int:
    """The PluginField length a creator advertises: 1 for scalars, 0 for variable length."""
    return 1 if ftype in (FieldType.INT, FieldType.FLOAT) else 0


_CXX_SCALAR = {FieldType.INT: "int32_t", FieldType.FLOAT: "float", FieldType.STRING: "char const*"}


def _cxx_value(ftype: FieldType, value: Any) -> str:
    if ftype is FieldType.INT:
        return str(int(value))
    if ftype is FieldType.FLOAT:
        text = repr(float(value))
        return text + ("F" if ("." in text or "e" in text) else ".F")
    if ftype is FieldType.STRING:
        return _cxx_string(value)
    raise ValueError(f"no C++ literal for {ftype}")


def render_spec_header(specs: Sequence[PluginSpec] | None = None) -> str:
    """The C++ header the creators include: every name, version, namespace and field."""
    specs = list(fusion_specs() if specs is None else specs)
    out = [
        "// Generated from fusion/rewrite/specs.py by fusion/plugins/library.py:render_spec_header. Do not edit:",
        "// build_library writes a fresh copy into the build folder; tests/test_plugins.py checks",
        "// that this committed copy is current (regenerate: python -m fusion.plugins.library header).",
        "#pragma once",
        "",
        "#include <cstdint>",
        "",
        '#include "NvInferRuntime.h"',
        "",
        "namespace fusion",
        "{",
        "namespace specs",
        "{",
        "",
        "struct FieldSpec",
        "{",
        "    char const* name;",
        "    nvinfer1::PluginFieldType type;",
        "    int32_t length; // 1: scalar; 0: variable length (strings, arrays)",
        "    bool required;",
        "};",
        "",
        "struct PluginSpec",
        "{",
        "    char const* name;",
        "    char const* version;",
        "    char const* pluginNamespace;",
        "    int32_t minInputs;",
        "    int32_t maxInputs;",
        "    int32_t nbOutputs;",
        "    int32_t nbFields;",
        "    FieldSpec const* fields;",
        "};",
    ]
    for spec in specs:
        ns = _cxx_namespace(spec.op_type)
        out += ["", f"// {spec.doc}", f"namespace {ns}", "{", "constexpr FieldSpec kFIELDS[] = {"]
        for f in spec.fields:
            if f.type not in _CXX_SCALAR:
                raise ValueError(f"{spec.op_type}.{f.name}: field type {f.type.name} has no C++ mapping yet")
            req = "true" if f.required else "false"
            out.append(
                f"    {{{_cxx_string(f.name)}, nvinfer1::PluginFieldType::{f.type.trt_name}, "
                f"{field_length(f.type)}, {req}}},"
            )
        n_min = sum(not p.optional for p in spec.inputs)
        out += [
            "};",
            f"constexpr PluginSpec kSPEC{{{_cxx_string(spec.op_type)}, {_cxx_string(spec.version)}, "
            f"{_cxx_string(spec.namespace)}, {n_min}, {len(spec.inputs)}, {len(spec.outputs)}, "
            f"{len(spec.fields)}, kFIELDS}};",
            "enum Field : int32_t",
            "{",
        ]
        out += [f"    k{f.name.upper()} = {i}," for i, f in enumerate(spec.fields)]
        out += ["};", "enum Input : int32_t", "{"]
        out += [f"    kINPUT_{p.name.upper()} = {i}," for i, p in enumerate(spec.inputs)]
        out.append("};")
        for f in spec.fields:
            ctype = _CXX_SCALAR[f.type]
            if f.default is not None:
                out.append(f"constexpr {ctype} k{f.name.upper()}_DEFAULT = {_cxx_value(f.type, f.default)};")
            if f.choices:
                vals = ", ".join(_cxx_value(f.type, c) for c in f.choices)
                out.append(f"constexpr {ctype} k{f.name.upper()}_CHOICES[] = {{{vals}}};")
                out.append(f"constexpr int32_t kNB_{f.name.upper()}_CHOICES = {len(f.choices)};")
        out.append(f"}} // namespace {ns}")
    out += ["", "} // namespace specs", "} // namespace fusion", ""]
    return "\n".join(out)


def write_spec_header(path: Path | None = None) -> Path:
    """Write the generated header (default: the committed copy in plugin_src/generated/)."""
    path = path or plugin_src_dir() / SPEC_HEADER_REL
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_spec_header())
    return path


_README_BEGIN = "<!-- BEGIN GENERATED: trt8 -->"
_README_END = "<!-- END GENERATED: trt8 -->"
_ARRIVES = {FieldType.INT: "kINT32 ×1", FieldType.FLOAT: "kFLOAT32 ×1", FieldType.STRING: "kCHAR × its length",
            FieldType.INTS: "kINT32 × n", FieldType.FLOATS: "kFLOAT32 × n"}  # fmt: skip


def render_trt8_table(specs: Sequence[PluginSpec] | None = None) -> str:
    """plugin_src/README.md's table of the TRT8 creators, from the specs."""
    rows = ["| creator (`IPluginCreator`) | version | namespace | inputs (ITensors) | fields: ONNX attribute → PluginField |",
            "| --- | --- | --- | --- | --- |"]  # fmt: skip
    for s in fusion_specs() if specs is None else specs:
        ins = ", ".join(f"`{p.name}`" + (" (optional)" if p.optional else "") for p in s.inputs)
        fields = "<br>".join(
            f"`{f.name}` {f.type.onnx_name} → {_ARRIVES.get(f.type, f.type.trt_name)}"
            + (", required" if f.required else f", default {f.default}")
            for f in s.fields
        )
        rows.append(f"| `{s.op_type}` | {s.version} | `{s.namespace}` | {ins} | {fields} |")
    note = ("\nEvery tensor (X and the outputs) fp32 or fp16, linear (`supportsFormatCombination`; TensorRT 8 has "
            "no bf16), inputs after X of X's type.  Plugin state serializes as the same fields.")  # fmt: skip
    return "\n".join(rows) + "\n" + note


def _readme_with_table(text: str) -> str:
    a, b = text.index(_README_BEGIN) + len(_README_BEGIN), text.index(_README_END)
    return text[:a] + "\n<!-- generated from fusion/rewrite/specs.py: python -m fusion.plugins.library readme -->\n" + \
        render_trt8_table() + "\n" + text[b:]  # fmt: skip


def write_readme_table(path: Path | None = None) -> Path:
    """Rewrite the TRT8 table in plugin_src/README.md."""
    path = path or plugin_src_dir() / "README.md"
    path.write_text(_readme_with_table(path.read_text()))
    return path


# --------------------------------------------------------------------------- toolchain


@dataclass(frozen=True)
class Toolchain:
    nvcc: Path
    cuda_include: Path
    trt_include: Path | None  # None: the project's own TensorRT 8 declarations
    cublas_include: Path
    trt_version: str = ""  # of trt_include, from NvInferVersion.h ("own" for our declarations)

    @property
    def includes(self) -> list[str]:
        trt = [f"-I{self.trt_include}"] if self.trt_include is not None else []
        return [*trt, f"-I{self.cublas_include}", f"-I{self.cuda_include}"]


def _package_dirs(name: str) -> list[Path]:
    """A package's folders, found without importing it (kernel_lens imports triton)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return []
    if spec is None or spec.submodule_search_locations is None:
        return []
    return [Path(p) for p in spec.submodule_search_locations]


def find_nvcc(nvcc: str | None = None) -> Path:
    """The given nvcc (only it), else $NVCC, PATH, /usr/local/cuda/bin."""
    candidates = [nvcc] if nvcc else [os.environ.get("NVCC"), shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"]
    for c in candidates:
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return Path(c).absolute()
    if nvcc:
        raise PluginBuildError(f"nvcc not found at {nvcc}")
    raise PluginBuildError("nvcc not found: install the CUDA toolkit or pass nvcc= / set $NVCC")


def trt_header_version(include: Path) -> tuple[int, int, int] | None:
    """(major, minor, patch) from ``include/NvInferVersion.h``; None if it is not there."""
    path = Path(include) / "NvInferVersion.h"
    if not path.is_file():
        return None
    text = path.read_text(errors="replace")
    nums = []
    for part in ("MAJOR", "MINOR", "PATCH"):
        m = re.search(rf"#define\s+(?:NV_TENSORRT_{part}|TRT_{part}_ENTERPRISE)\s+(\d+)", text)
        nums.append(int(m.group(1)) if m else 0)
    return (nums[0], nums[1], nums[2]) if nums[0] else None


def _check_trt_headers(d: Path, trt: int) -> bool:
    """True if ``d`` holds TensorRT headers of flavour ``trt``; raise if it holds another one's."""
    version = trt_header_version(d)
    if version is None or not (d / "NvInferRuntime.h").is_file():
        return False
    fits = version[0] >= 10 if trt == 10 else version[0] == 8
    if not fits:
        dotted = ".".join(map(str, version))
        raise PluginBuildError(f"TensorRT headers in {d} are {dotted}, not for the TRT{trt} library: build with "
                               f"--trt {10 if version[0] >= 10 else 8} or give other headers")  # fmt: skip
    return True


def find_trt_include(trt: int = 10, given: str | Path | None = None) -> Path | None:
    """TensorRT headers of flavour ``trt``: ``given`` (only it), $TENSORRT_INCLUDE, then for
    TRT10 the kernel-lens wheel and system folders.  For TRT8 without headers: None (the
    project's own declarations).  Headers of the other flavour are refused."""
    if given is not None:
        if not _check_trt_headers(Path(given), trt):
            raise PluginBuildError(f"no TensorRT headers (NvInferRuntime.h, NvInferVersion.h) in {given}")
        return Path(given)
    cands: list[Path] = []
    if os.environ.get("TENSORRT_INCLUDE"):
        env = Path(os.environ["TENSORRT_INCLUDE"])
        if _check_trt_headers(env, trt):
            return env
    if trt == 8:
        return None
    cands += [d / "include" / "tensorrt" for d in _package_dirs("kernel_lens")]
    cands += [Path("/usr/include/x86_64-linux-gnu"), Path("/usr/local/tensorrt/include"), Path("/usr/include")]
    for d in cands:
        version = trt_header_version(d)
        if (d / "NvInferRuntime.h").is_file() and version and version[0] >= 10:
            return d
    raise PluginBuildError(
        f"TensorRT >= 10 headers (NvInferRuntime.h) not found: pip install {TRT_HEADERS_PIP} or set $TENSORRT_INCLUDE"
    )


def find_cublas_include(cuda_include: Path) -> Path:
    """cublasLt.h: $CUBLASLT_INCLUDE, the CUDA toolkit, the nvidia-cublas wheel, system."""
    cands: list[Path] = []
    if os.environ.get("CUBLASLT_INCLUDE"):
        cands.append(Path(os.environ["CUBLASLT_INCLUDE"]))
    cands.append(cuda_include)
    for d in _package_dirs("nvidia"):
        cands += [d / "cu13" / "include", d / "cublas" / "include"]
    cands.append(Path("/usr/include"))
    for d in cands:
        if (d / "cublasLt.h").is_file():
            return d
    raise PluginBuildError(f"cublasLt.h not found: pip install {CUBLAS_PIP} or set $CUBLASLT_INCLUDE")


def find_cuda_include(nvcc: Path) -> Path:
    """The CUDA runtime headers nvcc uses (it may be a wrapper script outside the toolkit)."""
    cands = [nvcc.parent.parent / "include"]
    try:
        dry = subprocess.run([str(nvcc), "--dryrun", "-c", "-x", "cu", os.devnull, "-o", os.devnull],
                             capture_output=True, text=True, timeout=60)  # fmt: skip
        cands += [Path(m) for m in re.findall(r'INCLUDES="-I([^"\s]+)', dry.stdout + dry.stderr)]
    except (OSError, subprocess.SubprocessError):
        pass
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            cands.append(Path(os.environ[env]) / "include")
    cands.append(Path("/usr/local/cuda/include"))
    for d in cands:
        if (d / "cuda_runtime_api.h").is_file():
            return d.resolve()
    raise PluginBuildError(f"CUDA headers (cuda_runtime_api.h) not found for {nvcc}")


def find_toolchain(nvcc: str | None = None, trt: int = 10, tensorrt_include: str | Path | None = None) -> Toolchain:
    nvcc_path = find_nvcc(nvcc)
    cuda_include = find_cuda_include(nvcc_path)
    trt_inc = find_trt_include(trt, tensorrt_include)
    version = ".".join(map(str, trt_header_version(trt_inc) or ())) if trt_inc is not None else "own"
    return Toolchain(nvcc_path, cuda_include, trt_inc, find_cublas_include(cuda_include), version)


def _arch_number(arch: str) -> str:
    m = re.fullmatch(r"(?:sm_|compute_)?(\d+[a-z]?)", arch.strip())
    if not m:
        raise PluginBuildError(f"bad CUDA arch {arch!r} (expected e.g. sm_90)")
    return m.group(1)


def gencode_flags(archs: Sequence[str]) -> list[str]:
    """SASS for each arch, plus PTX of the last one so newer GPUs can JIT it."""
    nums = [_arch_number(a) for a in archs]
    if not nums:
        raise PluginBuildError("no CUDA arch given")
    flags = [f"-gencode=arch=compute_{n},code=sm_{n}" for n in nums]
    flags.append(f"-gencode=arch=compute_{nums[-1]},code=compute_{nums[-1]}")
    return flags


# --------------------------------------------------------------------------- build


def library_sources(src: Path | None = None, trt: int = 10) -> list[Path]:
    """The library's sources: everything but tools/ and the other flavour's interface layer."""
    src = src or plugin_src_dir()
    skip = flavour(trt).skip
    files = []
    for p in src.rglob("*"):
        rel = p.relative_to(src).as_posix()
        if p.suffix in (".cu", ".cpp") and "tools" not in p.relative_to(src).parts and not rel.startswith(skip):
            files.append(p)
    return sorted(files)


def _tree_hash(src: Path, extra: Sequence[str]) -> str:
    h = hashlib.sha256()
    for p in sorted(src.rglob("*")):
        if p.is_file() and p.suffix in (".cu", ".cuh", ".cpp", ".h"):
            h.update(str(p.relative_to(src)).encode())
            h.update(p.read_bytes())
    for e in extra:
        h.update(e.encode())
    return h.hexdigest()


def _first_error(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if re.search(r"\berror\b", ln, re.IGNORECASE):
            return ln
    return lines[0] if lines else "no output"


def _run(cmd: Sequence[str], what: str) -> None:
    LOG.debug("%s", " ".join(cmd))
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise PluginBuildError(f"{what} failed: {_first_error(proc.stderr + proc.stdout)}")
    if proc.stderr.strip():
        LOG.debug("%s: %s", what, proc.stderr.strip())


def build_library(
    out_dir: Path | None = None,
    archs: Sequence[str] = ("sm_90",),
    nvcc: str | None = None,
    jobs: int = 2,
    *,
    with_harness: bool = False,
    trt: int = 10,
    tensorrt_include: str | Path | None = None,
) -> Path:
    """Compile plugin_src/ into ``out_dir/<flavour's library>`` (+ its describe helper).

    ``trt`` picks the flavour: 10 (IPluginV3, ``libfusion_plugins.so``) or 8
    (IPluginV2DynamicExt, ``libfusion_plugins_trt8.so``).  ``tensorrt_include`` (else
    $TENSORRT_INCLUDE) names real TensorRT headers, which must be of that flavour; TRT8
    builds without them use plugin_src/trt8/NvInfer8Abi.h.  Skips the work when the
    sources, the generated spec header, archs, flags and header version match the last
    build's stamp (toolchain paths are not part of it, so a prebuilt folder can move).
    ``with_harness`` also builds the GPU harness (TRT10 only).
    Raises PluginBuildError with a one-line reason.
    """
    fl = flavour(trt)
    if with_harness and fl.trt != 10:
        raise PluginBuildError("the harness drives the IPluginV3 library only (build it with --trt 10)")
    out = Path(out_dir) if out_dir is not None else Path.cwd() / "plugin_build"
    out = out.resolve()
    src = plugin_src_dir()
    header = render_spec_header()
    gencode = gencode_flags(archs)
    lib, describe, harness = out / fl.lib_name, out / fl.describe_name, out / HARNESS_NAME
    stamp = out / fl.stamp_name
    old: dict[str, Any] = {}
    if stamp.is_file():
        try:
            old = json.loads(stamp.read_text())
        except ValueError:
            old = {}
    # Named headers are checked first (a mismatched flavour fails before anything else);
    # their version is part of the key.
    given_inc = tensorrt_include or os.environ.get("TENSORRT_INCLUDE") or None
    headers = "own" if fl.trt == 8 and not given_inc else str(old.get("headers", ""))
    if given_inc:
        if tensorrt_include is not None and not _check_trt_headers(Path(tensorrt_include), fl.trt):
            raise PluginBuildError(f"no TensorRT headers (NvInferRuntime.h, NvInferVersion.h) in {tensorrt_include}")
        version = trt_header_version(Path(given_inc))
        headers = ".".join(map(str, version)) if version else "none"
    key = _tree_hash(src, [header, *gencode, *_FLAGS, ",".join(fl.exports), f"trt{fl.trt}", headers])
    lib_ok = old.get("hash") == key and lib.is_file() and describe.is_file()
    harness_ok = lib_ok and bool(old.get("harness")) and harness.is_file()
    if lib_ok and (harness_ok or not with_harness):
        LOG.info("plugin library up to date: %s", lib)
        return lib

    tc = find_toolchain(nvcc, fl.trt, tensorrt_include)
    if tc.trt_version != headers:  # TRT10 without named headers: key on what was found
        headers = tc.trt_version
        key = _tree_hash(src, [header, *gencode, *_FLAGS, ",".join(fl.exports), f"trt{fl.trt}", headers])
    out.mkdir(parents=True, exist_ok=True)
    gen_inc = _generated_includes(out / fl.include_dir, header, tc)
    # The fresh header shadows the committed copy (-I build/include comes first).
    includes = [f"-I{gen_inc}", f"-I{src}", *tc.includes]
    tool_base = [str(tc.nvcc), "-std=c++17", "-O2", *includes]
    if not lib_ok:
        stamp.unlink(missing_ok=True)
        _compile_and_link(tc, src, includes, gencode, out, jobs, fl)
        _build_describe(tool_base, src, fl, describe)
    if with_harness:
        _run([*tool_base, "-cudart", "static", str(src / "tools" / "harness.cpp"), "-o", str(harness), "-ldl",
              "-lpthread", "-lrt"], "build " + HARNESS_NAME)  # fmt: skip
    record = {"hash": key, "archs": list(archs), "harness": with_harness or harness_ok, "trt": fl.trt, "headers": headers}
    stamp.write_text(json.dumps(record, indent=1))
    LOG.info("built %s (TensorRT %s headers: %s)", lib, fl.trt, headers)
    return lib


def _generated_includes(gen_inc: Path, header: str, tc: Toolchain) -> Path:
    """The build's include folder: the fresh spec header and, for our own TensorRT 8
    declarations, an NvInferRuntime.h that forwards to them (the glue includes that name)."""
    (gen_inc / "generated").mkdir(parents=True, exist_ok=True)
    (gen_inc / SPEC_HEADER_REL).write_text(header)
    forward = gen_inc / "NvInferRuntime.h"
    if tc.trt_include is None:
        forward.write_text(f'// Written by fusion/plugins/library.py: no real TensorRT 8 headers were given.\n'
                           f'#pragma once\n#include "{TRT8_ABI_HEADER}"\n')  # fmt: skip
    else:
        forward.unlink(missing_ok=True)
    return gen_inc


def _build_describe(tool_base: list[str], src: Path, fl: Flavour, out: Path) -> None:
    tool = [*tool_base, "-cudart", "none", str(src / "tools" / fl.describe_src)]
    if fl.trt == 8:
        # getPluginRegistry / getLogger are defined by the tool and found by the library
        # with dlsym: export them.  pluginUtils reads the serialized fields.
        tool += [str(src / "common" / "pluginUtils.cpp"), "-Xlinker=--export-dynamic"]
    _run([*tool, "-o", str(out), "-ldl"], "build " + fl.describe_name)


def _compile_and_link(
    tc: Toolchain, src: Path, includes: list[str], gencode: list[str], out: Path, jobs: int, fl: Flavour
) -> None:
    base = [str(tc.nvcc), *_FLAGS, *includes]
    with tempfile.TemporaryDirectory(prefix="fusion_obj_") as tmp:
        obj_dir = Path(tmp)
        jobs_list = []
        for s in library_sources(src, fl.trt):
            obj = obj_dir / (str(s.relative_to(src)).replace("/", "__") + ".o")
            cmd = [*base, *(gencode if s.suffix == ".cu" else []), "-c", str(s), "-o", str(obj)]
            jobs_list.append((cmd, f"nvcc {s.relative_to(src)}", obj))
        LOG.info("compiling %d plugin sources with %s", len(jobs_list), tc.nvcc)
        with concurrent.futures.ThreadPoolExecutor(max(1, jobs)) as pool:
            futures = [pool.submit(_run, cmd, what) for cmd, what, _ in jobs_list]
            try:
                for f in futures:
                    f.result()
            except PluginBuildError:
                pool.shutdown(cancel_futures=True)  # report the first error, skip the rest
                raise
        vscript = obj_dir / "exports.map"
        vscript.write_text("{\n  global:\n" + "".join(f"    {e};\n" for e in fl.exports) + "  local:\n    *;\n};\n")
        tmp_lib = out / (fl.lib_name + ".tmp")
        link = [
            str(tc.nvcc), "-shared", "-cudart", "static", *gencode, "-o", str(tmp_lib),
            *[str(o) for _, _, o in jobs_list],
            f"-Xlinker=--version-script={vscript},--no-undefined,--exclude-libs,ALL",
            "-ldl", "-lpthread", "-lrt",
        ]  # fmt: skip
        _run(link, "link " + fl.lib_name)
        tmp_lib.replace(out / fl.lib_name)


# --------------------------------------------------------------------------- describe / check


def sample_fields(spec: PluginSpec) -> dict[str, Any]:
    """Field values to create a plugin with: the defaults, else a valid value of the type."""
    samples: dict[str, Any] = {}
    for f in spec.fields:
        if f.default is not None:
            samples[f.name] = f.default
        elif f.choices:
            samples[f.name] = f.choices[0]
        elif f.type is FieldType.FLOAT:
            samples[f.name] = 1e-5
        elif f.type is FieldType.INT:
            samples[f.name] = 8
        elif f.type is FieldType.STRING:
            samples[f.name] = "x"
    return samples


def library_flavour(lib: Path) -> Flavour:
    """Which flavour a built library is: only the TRT8 one exports ``fusion_trt8_register``
    (its name is in the file's dynamic string table; nothing is loaded to find out)."""
    marker = FLAVOURS[8].exports[0].encode()
    with open(lib, "rb") as f:
        data = f.read()
    return FLAVOURS[8] if marker in data else FLAVOURS[10]


def _describe_tool(lib: Path, fl: Flavour) -> Path:
    """The flavour's describe tool beside the library, else one built into a cache folder."""
    beside = lib.parent / fl.describe_name
    if beside.is_file():
        return beside
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "fusion" / "describe"
    tool = cache / fl.describe_name
    if not tool.is_file():
        tc = find_toolchain(trt=fl.trt)
        cache.mkdir(parents=True, exist_ok=True)
        src = plugin_src_dir()
        with tempfile.TemporaryDirectory() as tmp:
            inc = _generated_includes(Path(tmp), render_spec_header(), tc)
            _build_describe([str(tc.nvcc), "-std=c++17", "-O2", f"-I{inc}", f"-I{src}", *tc.includes], src, fl, tool)
    return tool


def describe_library(lib: Path, specs: Sequence[PluginSpec] | None = None, trt: int | None = None) -> list[dict[str, Any]]:
    """What each creator in ``lib`` exposes, as the describe tool reports it (no GPU needed).
    ``trt``: the library's flavour (default: found from the file)."""
    lib = Path(lib).resolve()
    if not lib.is_file():
        raise PluginBuildError(f"plugin library not found: {lib}")
    fl = flavour(trt) if trt is not None else library_flavour(lib)
    specs = list(fusion_specs() if specs is None else specs)
    args = [str(_describe_tool(lib, fl)), str(lib)]
    for spec in specs:
        for name, value in sample_fields(spec).items():
            args.append(f"{spec.op_type}.{name}={value}")
    proc = subprocess.run(args, capture_output=True, text=True)
    if proc.returncode != 0:
        raise PluginBuildError(f"cannot load {lib.name}: {_first_error(proc.stderr + proc.stdout)}")
    try:
        return json.loads(proc.stdout)["creators"]
    except (ValueError, KeyError) as e:
        raise PluginBuildError(f"{fl.describe_name} printed no creator list: {e}") from e


def compare_with_specs(
    creators: Sequence[Mapping[str, Any]], specs: Sequence[PluginSpec], trt: int = 10
) -> list[str]:
    """Every difference between the described creators and the specs (empty: they agree)."""
    fl = flavour(trt)
    problems: list[str] = []
    by_key: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    for c in creators:
        key = (c["name"], c["version"], c["namespace"])
        if key in by_key:
            problems.append(f"creator {key} appears twice")
        by_key[key] = c
    wanted = {s.key for s in specs}
    for key in sorted(set(by_key) - wanted):
        problems.append(f"creator {key[0]} version {key[1]!r} namespace {key[2]!r} is in the library but not in the specs")
    for spec in specs:
        c = by_key.get(spec.key)
        op = spec.op_type
        if c is None:
            near = [k for k in by_key if k[0] == op]
            hint = f" (library has {near})" if near else ""
            problems.append(f"{op}: no creator with version {spec.version!r} namespace {spec.namespace!r}{hint}")
            continue
        iface = c.get("interface", {})
        if (iface.get("kind"), iface.get("major")) != fl.creator_interface or (
            fl.trt == 10 and iface.get("minor") != CREATOR_INTERFACE[2]
        ):
            problems.append(f"{op}: creator interface {iface} is not {fl.creator_interface}")
        if fl.trt == 8 and c.get("registered_namespace") != spec.namespace:
            problems.append(f"{op}: registered in namespace {c.get('registered_namespace')!r}, spec says {spec.namespace!r}")
        want = [(f.name, f.type.trt_name, field_length(f.type)) for f in spec.fields]
        got = [(f["name"], f["type"], f["length"]) for f in c.get("fields", [])]
        problems += _field_diffs(f"{op} getFieldNames", want, got)
        plugin = c.get("plugin") or {}
        if not plugin.get("created"):
            problems.append(f"{op}: createPlugin with fields {sample_fields(spec)} failed: {plugin.get('error', '')}")
            continue
        piface = plugin.get("interface", {})
        if (piface.get("kind"), piface.get("major")) != fl.plugin_interface or (
            fl.trt == 10 and piface.get("minor") != PLUGIN_INTERFACE[2]
        ):
            problems.append(f"{op}: plugin interface {piface} is not {fl.plugin_interface}")
        core = (plugin.get("name"), plugin.get("version"), plugin.get("namespace"))
        if core != spec.key:
            problems.append(f"{op}: plugin reports name/version/namespace {core}, spec says {spec.key}")
        if fl.trt == 10:
            for cap in ("core", "build", "runtime"):
                if not plugin.get("capabilities", {}).get(cap):
                    problems.append(f"{op}: plugin has no {cap} capability")
        else:
            formats = plugin.get("formats", {})
            if formats != {"float": True, "half": True, "int8": False}:
                problems.append(f"{op}: supportsFormatCombination takes {formats}, want fp32 and fp16 only")
            if not plugin.get("rejects_foreign"):
                problems.append(f"{op}: deserializePlugin accepted bytes that are not a serialized plugin")
        if plugin.get("nb_outputs") != len(spec.outputs):
            problems.append(f"{op}: plugin has {plugin.get('nb_outputs')} outputs, spec says {len(spec.outputs)}")
        ser = [(f["name"], f["type"]) for f in plugin.get("serialized", [])]
        problems += _field_diffs(f"{op} getFieldsToSerialize", [(n, t) for n, t, _ in want], ser)
        for check in ("roundtrip", "clone"):
            if not plugin.get(check):
                problems.append(f"{op}: {check} check failed: {plugin.get(check + '_error', '')}")
    return problems


def _field_diffs(where: str, want: Sequence[tuple], got: Sequence[tuple]) -> list[str]:
    if list(want) == list(got):
        return []
    out: list[str] = []
    wmap, gmap = {w[0]: w for w in want}, {g[0]: g for g in got}
    for name in wmap.keys() - gmap.keys():
        out.append(f"{where}: missing field {name!r} {wmap[name][1:]}")
    for name in gmap.keys() - wmap.keys():
        out.append(f"{where}: extra field {name!r} {gmap[name][1:]}")
    for name in wmap.keys() & gmap.keys():
        if wmap[name] != gmap[name]:
            out.append(f"{where}: field {name!r} is {gmap[name][1:]}, spec says {wmap[name][1:]}")
    if not out:
        out.append(f"{where}: field order {[g[0] for g in got]} differs from spec {[w[0] for w in want]}")
    return sorted(out)


def check_library(lib: Path, specs: Sequence[PluginSpec] | None = None, trt: int | None = None) -> list[str]:
    """Load ``lib`` (no GPU needed) and list every way its creators differ from the specs.
    Either flavour; ``trt`` (10 or 8) overrides the one found from the file."""
    specs = list(fusion_specs() if specs is None else specs)
    lib = Path(lib)
    fl = flavour(trt) if trt is not None else (library_flavour(lib) if lib.is_file() else FLAVOURS[10])
    return compare_with_specs(describe_library(lib, specs, fl.trt), specs, fl.trt)


# --------------------------------------------------------------------------- kernels (CuPy, tests)

NORM_OPS = ("layernorm", "rmsnorm")
_DTYPE_TAG = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}
_VEC_MAX = {"float32": 4, "float16": 8, "bfloat16": 8}
_ELEM_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
# Mirrors plugin_src/common/normKernels.cuh / normLaunch.cu (tests compare both).
NORM_WARP_THREADS = 128
NORM_BLOCK_MAX_THREADS = 512
NORM_LOOP_THREADS = 512
NORM_MAX_N = 8  # packs per lane (warp path) or thread (block path)
_INT_MAX = 2**31 - 1


def kernel_sources() -> dict[str, Path]:
    """Kernel files that compile under cupy.RawModule (include dir: ``kernel_include_dir()``)."""
    src = plugin_src_dir()
    return {
        "layernorm": src / "layernorm" / "layerNormKernel.cu",
        "rmsnorm": src / "rmsnorm" / "rmsNormKernel.cu",
        "fc": src / "fc" / "fcKernel.cu",
        "groupnorm": src / "groupnorm" / "groupNormKernel.cu",
        "skipnorm": src / "skipnorm" / "skipNormKernel.cu",
    }


def kernel_include_dir() -> Path:
    return plugin_src_dir()


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def norm_launch_config(op: str, dtype: str, rows: int, cols: int, vec_ok: bool = True) -> tuple[str, int, int]:
    """(kernel name, grid, block) the plugin uses for ``rows x cols`` (see normLaunch.cu)."""
    if op not in NORM_OPS or dtype not in _DTYPE_TAG:
        raise ValueError(f"no norm kernel for {op}/{dtype}")
    if rows <= 0 or not 0 < cols <= _INT_MAX:
        raise ValueError(f"nothing to launch for rows={rows} cols={cols}")
    vmax = _VEC_MAX[dtype]
    vec = vmax if vec_ok and cols % vmax == 0 else 1
    nv = cols // vec
    tag = _DTYPE_TAG[dtype]
    if nv <= 32 * NORM_MAX_N:
        n = _ceil_div(nv, 32)
        name, block = f"fusion_{op}_warp_{tag}_v{vec}_n{n}", NORM_WARP_THREADS
        grid = _ceil_div(rows, NORM_WARP_THREADS // 32)
    elif nv <= NORM_BLOCK_MAX_THREADS * NORM_MAX_N:
        n = min(_ceil_div(nv, 256), NORM_MAX_N)
        block = _ceil_div(_ceil_div(nv, n), 32) * 32
        name, grid = f"fusion_{op}_block_{tag}_v{vec}_n{n}", rows
    else:
        name, block, grid = f"fusion_{op}_loop_{tag}_v{vec}", NORM_LOOP_THREADS, rows
    return name, min(grid, _INT_MAX), block


def kernel_compile_options() -> tuple[str, ...]:
    """NVRTC options for ``kernel_sources()``: C++17, plugin_src/ and the CUDA headers."""
    opts = ["--std=c++17", f"-I{kernel_include_dir()}"]
    cands = [Path(os.environ[e]) / "include" for e in ("CUDA_PATH", "CUDA_HOME") if os.environ.get(e)]
    nvcc = shutil.which("nvcc")
    if nvcc:
        cands.append(Path(nvcc).resolve().parent.parent / "include")
    cands.append(Path("/usr/local/cuda/include"))
    for d in cands:
        if (d / "cuda_bf16.h").is_file():
            opts.append(f"-I{d}")
            break
    return tuple(opts)


def kernel_code(name: str) -> str:
    """A kernel file's source, prefixed with a hash of the headers it may include
    (CuPy's compile cache keys on the source text, not on included files)."""
    src = kernel_sources()[name]
    h = hashlib.sha256()
    for p in sorted(kernel_include_dir().rglob("*.cuh")):
        h.update(p.read_bytes())
    return f"// headers {h.hexdigest()[:16]}\n" + src.read_text()


def load_kernel_module(name: str) -> Any:
    """``cupy.RawModule`` of one kernel file (``kernel_sources()`` keys); needs CuPy and a GPU."""
    import cupy  # noqa: PLC0415 - optional dependency

    return cupy.RawModule(code=kernel_code(name), options=kernel_compile_options())


def launch_norm(
    module: Any,
    op: str,
    dtype: str,
    x: int,
    gamma: int | None,
    beta: int | None,
    y: int,
    rows: int,
    cols: int,
    eps: float,
    stream: Any = None,
) -> str:
    """Launch the norm kernel the plugin would pick, on raw device pointers (ints; None:
    absent), on `stream` (a cupy Stream / ExternalStream) or CuPy's current one.
    Returns the kernel's name."""
    import numpy as np  # noqa: PLC0415

    if op == "rmsnorm":
        beta = None
    aligned = all(p is None or p % 16 == 0 for p in (x, gamma, beta, y))
    name, grid, block = norm_launch_config(op, dtype, rows, cols, aligned)
    fn = module.get_function(name)
    args = (x, gamma, beta, y, np.int64(rows), np.int32(cols), np.float32(eps))
    if stream is None:
        fn((grid,), (block,), args)  # CuPy's current stream
    else:
        with stream:  # RawKernel launches on the current stream
            fn((grid,), (block,), args)
    return name


def launch_skip_norm(
    module: Any, op: str, dtype: str, x: int, skip: int, bias: int | None, gamma: int | None, beta: int | None,
    y: int, sum_out: int | None, rows: int, cols: int, eps: float,
) -> str:
    """Launch the skip-norm kernel (``kernel_sources()["skipnorm"]``) on raw device pointers
    (None: absent) on CuPy's current stream; the plain norm's launch policy, "fusion_skip"
    names.  Returns the kernel's name."""
    import numpy as np  # noqa: PLC0415

    if op == "rmsnorm":
        beta = None
    aligned = all(p is None or p % 16 == 0 for p in (x, skip, bias, gamma, beta, y, sum_out))
    name, grid, block = norm_launch_config(op, dtype, rows, cols, aligned)
    name = "fusion_skip" + name.removeprefix("fusion_")
    args = (x, skip, bias, gamma, beta, y, sum_out, np.int64(rows), np.int32(cols), np.float32(eps))
    module.get_function(name)((grid,), (block,), args)
    return name


def library_norm_plan(
    lib: Path, op: str, dtype: str, rows: int, cols: int, vec_ok: bool = True
) -> tuple[str, int, int] | None:
    """The launch the built library would make (its exported ``fusion_norm_plan``); no GPU needed."""
    dll = ctypes.CDLL(str(lib))
    fn = dll.fusion_norm_plan
    c = ctypes
    fn.argtypes = [c.c_int, c.c_int, c.c_longlong, c.c_longlong, c.c_int,
                   c.c_char_p, c.c_int, c.POINTER(c.c_longlong), c.POINTER(c.c_int)]  # fmt: skip
    fn.restype = ctypes.c_int
    name = ctypes.create_string_buffer(64)
    grid, block = ctypes.c_longlong(), ctypes.c_int()
    rc = fn(NORM_OPS.index(op), list(_DTYPE_TAG).index(dtype), rows, cols, int(vec_ok), name, 64,
            ctypes.byref(grid), ctypes.byref(block))  # fmt: skip
    return None if rc != 0 else (name.value.decode(), grid.value, block.value)


GROUPNORM_DTYPES = {"float32": "f32", "float16": "f16"}
# Mirrors plugin_src/groupnorm/groupNormKernels.cuh / groupNormLaunch.cu (tests compare both).
GROUPNORM_THREADS = 1024
GROUPNORM_TARGET_THREADS = 256  # the policy prefers CTAs this small (several share an SM)
GROUPNORM_STAGE_THREADS = 512  # larger CTAs fill an SM: staged where the device can
GROUPNORM_PAIR_THREADS = 512  # fp16 there: the wide kernel in CTAs this size, two an SM, one a group
GROUPNORM_STAGED_KS = {4: 40}  # the staged kernels' K per pack width
# The wide kernels' (pack width, K of the register head, loads the next head ahead and reduces its
# head first), in the launcher's order of preference.
GROUPNORM_WIDE = ((4, 32, False), (8, 48, True), (8, 64, False))
GROUPNORM_STATIC_SMEM = 1024  # what the opt-in must leave for the kernels' static shared memory
# The stream path (sm_90+: fp32 groups past the registers; fp16 ones, and before sm_90 all, past the
# wide path): 128-thread CTAs, at most this many an SM, chunks of 4 packs a thread, a partial
# polled this often before its CTA computes it.
GROUPNORM_STREAM_THREADS = 128
GROUPNORM_STREAM_CTAS = 9
GROUPNORM_STREAM_PACKS = 4
GROUPNORM_STREAM_PATIENCE = 64
# Elements per thread of the register path, per pack width (1: scalar, where K above 24 spills).
GROUPNORM_KS = {4: (4, 8, 16, 24, 32, 40), 8: (8, 16, 32, 48, 64, 80), 1: (8, 16, 24)}


def groupnorm_reg_kernel(dtype: str, vec: int, k: int) -> str:
    """The register-path kernel's name (groupNormKernels.cuh's X-macros) for K elements a thread."""
    return f"fusion_groupnorm_reg_{GROUPNORM_DTYPES[dtype]}_v{vec}_k{k}"


def groupnorm_staged_kernel(dtype: str, vec: int, k: int) -> str:
    """The staged kernel's name for the register path's K (groupNormKernels.cuh)."""
    return f"fusion_groupnorm_staged_{GROUPNORM_DTYPES[dtype]}_v{vec}_k{k}"


def groupnorm_wide_kernel(dtype: str, vec: int, k: int) -> str:
    """The wide kernel's name for a register head of K elements a thread (groupNormKernels.cuh)."""
    return f"fusion_groupnorm_wide_{GROUPNORM_DTYPES[dtype]}_v{vec}_k{k}"


def groupnorm_stream_kernel(dtype: str, vec: int) -> str:
    """The stream kernel's name (groupNormKernels.cuh)."""
    return f"fusion_groupnorm_stream_{GROUPNORM_DTYPES[dtype]}_v{vec}"


def groupnorm_stream_chunks(vec: int, cols: int) -> int:
    """A group's chunks on the stream path."""
    return _ceil_div(cols // vec, GROUPNORM_STREAM_PACKS * GROUPNORM_STREAM_THREADS)


def groupnorm_stream_launch(dtype: str, vec: int, rows: int, cols: int, stream_ctas: int) -> tuple[str, int, int] | None:
    """(name, grid, block) of the stream launch for ``rows`` groups of ``cols`` elements: the
    chunks on the ``stream_ctas`` CTAs the device holds at once (at most one a chunk); None
    without them, for scalar packs or past its int chunk count."""
    chunks = groupnorm_stream_chunks(vec, cols)
    if stream_ctas <= 0 or vec != _VEC_MAX[dtype] or cols > _INT_MAX or rows > _INT_MAX // chunks:
        return None
    grid = min(rows * chunks, stream_ctas)
    return groupnorm_stream_kernel(dtype, vec), grid, GROUPNORM_STREAM_THREADS


def groupnorm_workspace(name: str, rows: int, cols: int) -> int:
    """Workspace bytes of a GroupNorm launch: a 64-bit partial a chunk (stream kernels), else 0."""
    m = re.search(r"_stream_\w+_v(\d+)$", name)
    return rows * groupnorm_stream_chunks(int(m.group(1)), cols) * 8 if m else 0


def groupnorm_smem(name: str, dtype: str, cols: int, block: int = GROUPNORM_THREADS) -> int:
    """Dynamic shared memory bytes of a GroupNorm launch: a group (staged kernels), a group's
    tail past the registers of ``block`` threads (wide kernels), two chunks (stream kernels), else 0."""
    if "_staged_" in name:
        return cols * _ELEM_BYTES[dtype]
    if "_stream_" in name:
        return 2 * GROUPNORM_STREAM_PACKS * GROUPNORM_STREAM_THREADS * 16
    m = re.search(r"_wide_\w+_v(\d+)_k(\d+)$", name)
    if m is None:
        return 0
    vec, k = int(m.group(1)), int(m.group(2))
    return (cols // vec - k // vec * block) * 16


def _wide_kernels(dtype: str, vec: int, cols: int, block: int, room: int, ahead_first: bool) -> list[str]:
    """The wide kernels whose head of ``block`` threads is full and whose tail fits ``room``
    bytes, the launcher's pick first: with ``ahead_first``, those that reduce their head first
    (and load the next ahead where CTAs take rows in turn) before the others; else only the others."""
    fits = [(groupnorm_wide_kernel(dtype, vec, k), ahead) for v, k, ahead in GROUPNORM_WIDE if v == vec]
    fits = [(name, ahead) for name, ahead in fits
            if (ahead_first or not ahead) and 0 < groupnorm_smem(name, dtype, cols, block) <= room]
    return [name for name, ahead in sorted(fits, key=lambda f: not f[1])]


def groupnorm_wide_launches(dtype: str, vec: int, rows: int, cols: int, stage_sms: int,
                            smem_optin: int) -> list[tuple[str, int, int]]:  # fmt: skip
    """The wide launches for groups past the registers, the launcher's pick first (_wide_kernels):
    1024 threads, the tail within the opt-in (less GROUPNORM_STATIC_SMEM), on min(rows, stage_sms)
    CTAs where ``stage_sms``, which then take rows in turn where there are more rows (and only
    then load their next head ahead)."""
    grid = min(rows, stage_sms or _INT_MAX)
    names = _wide_kernels(dtype, vec, cols, GROUPNORM_THREADS, smem_optin - GROUPNORM_STATIC_SMEM,
                          0 < stage_sms < rows)  # fmt: skip
    return [(name, grid, GROUPNORM_THREADS) for name in names]


def groupnorm_wide_launch(dtype: str, vec: int, rows: int, cols: int, stage_sms: int,
                          smem_optin: int) -> tuple[str, int, int] | None:  # fmt: skip
    """The launcher's wide launch (groupnorm_wide_launches), or None where no tail fits."""
    return next(iter(groupnorm_wide_launches(dtype, vec, rows, cols, stage_sms, smem_optin)), None)


def groupnorm_pair_launch(dtype: str, vec: int, rows: int, cols: int, stage_sms: int,
                          smem_optin: int) -> tuple[str, int, int] | None:  # fmt: skip
    """fp16 groups whose register-path CTA would fill an SM: the wide kernel (_wide_kernels, head
    first where the groups outnumber the pairs the SMs hold) in GROUPNORM_PAIR_THREADS-thread
    CTAs, two an SM where two tails fit the opt-in, one a group; else None."""
    if dtype != "float16" or stage_sms <= 0:
        return None
    names = _wide_kernels(dtype, vec, cols, GROUPNORM_PAIR_THREADS, smem_optin // 2 - GROUPNORM_STATIC_SMEM,
                          rows > 2 * stage_sms)  # fmt: skip
    return (names[0], min(rows, _INT_MAX), GROUPNORM_PAIR_THREADS) if names else None


def stream_ctas_for(stage_sms: int, stream_ctas: int | None) -> int:
    """The stream kernel's CTAs a device holds at once: ``stream_ctas``, or where None (a device
    given as (stage_sms, smem_optin)) GROUPNORM_STREAM_CTAS an SM on sm_90+ and none before."""
    return stage_sms * GROUPNORM_STREAM_CTAS if stream_ctas is None else stream_ctas


def groupnorm_plan(dtype: str, rows: int, cols: int, vec_ok: bool = True, stage_sms: int = 0,
                   smem_optin: int = 0, stream_ctas: int | None = None) -> tuple[str, int, int]:  # fmt: skip
    """(kernel name, grid, block) for ``rows`` groups of ``cols`` elements (see groupNormLaunch.cu):
    the register path with the smallest K whose CTA has at most 256 threads, else the largest K
    that fits 1024 threads; a group past that, with 16-byte packs: in fp32 on sm_90+
    (``stage_sms``) the stream path (groupnorm_stream_launch on ``stream_ctas`` CTAs, see
    stream_ctas_for; groupnorm_workspace gives its workspace), else the wide path where its tail
    fits ``smem_optin`` (the device's opt-in shared memory per CTA, less GROUPNORM_STATIC_SMEM),
    else the stream path where ``stream_ctas``; else the loop path.  A register-path CTA over 512
    threads fills an SM: with ``stage_sms`` (the device's SM count where it runs the staged
    kernels, sm_90+) and the group within the opt-in, the staged kernel runs instead, on
    min(rows, stage_sms) CTAs; fp16 takes groupnorm_pair_launch there.  The wide path runs on
    min(rows, stage_sms) CTAs where ``stage_sms``.  ``groupnorm_smem`` gives the launch's shared
    memory."""
    if dtype not in GROUPNORM_DTYPES:
        raise ValueError(f"no groupnorm kernel for {dtype}")
    if rows <= 0 or cols <= 0:
        raise ValueError(f"nothing to launch for rows={rows} cols={cols}")
    tag, vmax = GROUPNORM_DTYPES[dtype], _VEC_MAX[dtype]
    vec = vmax if vec_ok and cols % vmax == 0 else 1
    fits = [(k, block) for k, block in groupnorm_blocks(vec, cols) if block <= GROUPNORM_THREADS]
    if not fits:
        if vec > 1:
            stream = groupnorm_stream_launch(dtype, vec, rows, cols, stream_ctas_for(stage_sms, stream_ctas))
            wide = None if dtype == "float32" and stream and stage_sms > 0 else groupnorm_wide_launch(
                dtype, vec, rows, cols, stage_sms, smem_optin)
            if wide or stream:
                return wide or stream
        return f"fusion_groupnorm_loop_{tag}_v{vec}", min(rows, _INT_MAX), GROUPNORM_THREADS
    k, block = next(((k, b) for k, b in fits if b <= GROUPNORM_TARGET_THREADS), fits[-1])
    staged = groupnorm_staged_kernel(dtype, vec, k)
    fills_sm = stage_sms > 0 and vec > 1 and block > GROUPNORM_STAGE_THREADS
    if (fills_sm and GROUPNORM_STAGED_KS.get(vec) == k
            and groupnorm_smem(staged, dtype, cols) <= smem_optin - GROUPNORM_STATIC_SMEM):
        return staged, min(rows, stage_sms), block
    pair = groupnorm_pair_launch(dtype, vec, rows, cols, stage_sms, smem_optin) if fills_sm else None
    return pair or (groupnorm_reg_kernel(dtype, vec, k), min(rows, _INT_MAX), block)


def groupnorm_blocks(vec: int, cols: int) -> list[tuple[int, int]]:
    """(K, threads) for each register-path K of this pack width: the CTA that holds a group of
    ``cols`` elements with K per thread (a multiple of 32, maybe over 1024)."""
    nv = cols // vec
    return [(k, _ceil_div(_ceil_div(nv, k // vec), 32) * 32) for k in GROUPNORM_KS[vec]]


def groupnorm_candidates(dtype: str, rows: int, cols: int, stage_sms: int = 0, smem_optin: int = 0,
                         stream_ctas: int | None = None) -> list[tuple[str, int, int]]:  # fmt: skip
    """Every launch (kernel name, grid, block) of the vector packs that holds ``rows`` groups of
    ``cols`` elements: each register-path K with the fewest threads (<= 1024) that cover a group,
    its staged launch where there is one, the fp16 pair launch where a CTA would fill an SM
    (groupnorm_pair_launch), and where no K holds the group the wide launches and
    the stream launch, where they fit (the device as in groupnorm_plan; the policy
    picks one, the benchmark's sweep times all)."""
    vec = _VEC_MAX.get(dtype, 0)
    if dtype not in GROUPNORM_DTYPES or rows <= 0 or cols <= 0 or cols % vec:
        return []
    room = smem_optin - GROUPNORM_STATIC_SMEM
    out = []
    for k, block in groupnorm_blocks(vec, cols):
        if block <= GROUPNORM_THREADS:
            out.append((groupnorm_reg_kernel(dtype, vec, k), min(rows, _INT_MAX), block))
            staged = groupnorm_staged_kernel(dtype, vec, k)
            if stage_sms > 0 and GROUPNORM_STAGED_KS.get(vec) == k and groupnorm_smem(staged, dtype, cols) <= room:
                out.append((staged, min(rows, stage_sms), block))
    if out:
        fills_sm = out[-1][2] > GROUPNORM_STAGE_THREADS  # even the largest K's CTA
        pair = groupnorm_pair_launch(dtype, vec, rows, cols, stage_sms, smem_optin) if fills_sm else None
        return out + [pair] if pair else out
    wide = groupnorm_wide_launches(dtype, vec, rows, cols, stage_sms, smem_optin)
    stream = groupnorm_stream_launch(dtype, vec, rows, cols, stream_ctas_for(stage_sms, stream_ctas))
    return wide + [stream] if stream else wide


def groupnorm_launch_config(dtype: str, n: int, channels: int, groups: int, spatial: int, vec_ok: bool = True,
                            stage_sms: int = 0, smem_optin: int = 0,
                            stream_ctas: int | None = None) -> tuple[str, int, int]:  # fmt: skip
    """(kernel name, grid, block) the FusedGroupNorm plugin uses for x [n, channels, spatial]
    (vec_ok: x and y 16-byte aligned; the device as in groupnorm_plan)."""
    if dtype not in GROUPNORM_DTYPES or groups <= 0 or channels % groups:
        raise ValueError(f"no groupnorm launch for {dtype}, {channels} channels in {groups} groups")
    return groupnorm_plan(dtype, n * groups, channels // groups * spatial, vec_ok, stage_sms, smem_optin, stream_ctas)


def device_groupnorm_limits(module: Any = None) -> tuple[int, int, int]:
    """(stage_sms, smem_optin, stream_ctas) of CuPy's current device, as the plugin's launcher asks
    the CUDA runtime: its SM count on sm_90+ (else 0), the shared memory a CTA may opt in to, and
    the stream kernel's CTAs it holds at once: its SMs x what the occupancy calculator gives
    ``module``'s stream kernel (a RawModule of the groupnorm kernels), at most
    GROUPNORM_STREAM_CTAS (without ``module``: GROUPNORM_STREAM_CTAS an SM on sm_90+, none
    before).  (NVRTC compiles the kernels for the device itself, so the staged ones are never
    empty builds.)"""
    import cupy  # noqa: PLC0415 - optional dependency

    dev = cupy.cuda.Device()
    attrs = dev.attributes
    sms = int(attrs["MultiProcessorCount"])
    stage_sms = sms if int(dev.compute_capability) >= 90 else 0
    stream_ctas = None
    if module is not None:
        name = groupnorm_stream_kernel("float32", 4)
        fn = module.get_function(name)
        smem = fn.shared_size_bytes + groupnorm_smem(name, "float32", 0)
        stream_ctas = sms * stream_ctas_per_sm(attrs, fn.num_regs, smem)
    return stage_sms, int(attrs["MaxSharedMemoryPerBlockOptin"]), stream_ctas_for(stage_sms, stream_ctas)


def stream_ctas_per_sm(attrs: dict[str, int], regs: int, smem: int) -> int:
    """The stream kernel's CTAs (GROUPNORM_STREAM_THREADS threads, ``regs`` registers a thread,
    ``smem`` bytes of shared memory) an SM of a device with CuPy's ``attrs`` holds at once, by the
    occupancy calculator's rules (registers allocated 256 a warp, 1 KB of shared memory reserved
    a CTA from sm_80), at most GROUPNORM_STREAM_CTAS: what the plugin's launcher asks the CUDA
    runtime for."""
    warps = GROUPNORM_STREAM_THREADS // 32
    reg_warps = attrs["MaxRegistersPerMultiprocessor"] // (_ceil_div(regs * 32, 256) * 256)
    smem_ctas = attrs["MaxSharedMemoryPerMultiprocessor"] // (smem + attrs.get("ReservedSharedMemoryPerBlock", 0))
    return min(GROUPNORM_STREAM_CTAS, attrs["MaxThreadsPerMultiProcessor"] // GROUPNORM_STREAM_THREADS,
               attrs["MaxBlocksPerMultiprocessor"], reg_warps // warps, smem_ctas)  # fmt: skip


_WORKSPACES: dict[tuple[int, int], Any] = {}  # (device, log2 of its size) -> a stream launch's buffer


def _groupnorm_workspace_buffer(nbytes: int) -> Any:
    """A device buffer of at least ``nbytes`` for the current device, kept for later launches (a
    CUDA graph replays the pointer it captured); launches that share it run on one stream."""
    import cupy  # noqa: PLC0415

    key = (cupy.cuda.Device().id, max(nbytes, 1 << 20).bit_length())
    if key not in _WORKSPACES:
        _WORKSPACES[key] = cupy.empty(1 << key[1], dtype=cupy.uint8)
    return _WORKSPACES[key]


def launch_groupnorm(module: Any, dtype: str, x: int, gamma: int, beta: int, y: int, n: int, channels: int,
                     groups: int, spatial: int, eps: float, silu: bool, config: tuple[str, int, int] | None = None,
                     patience: int = GROUPNORM_STREAM_PATIENCE) -> str:  # fmt: skip
    """Launch the GroupNorm kernel as the plugin does, on raw device pointers (CuPy's current stream);
    ``config`` (kernel name, grid, block) overrides the policy's choice (the benchmark's sweep).
    The stream kernels get their workspace (filled with 0xFF first, as the plugin does) and
    ``patience`` (polls before a CTA computes a missing partial itself).  Returns the kernel's name."""
    import cupy  # noqa: PLC0415
    import numpy as np  # noqa: PLC0415

    aligned = x % 16 == 0 and y % 16 == 0
    rows, cols = n * groups, channels // groups * spatial
    name, grid, block = config or groupnorm_launch_config(
        dtype, n, channels, groups, spatial, aligned, *device_groupnorm_limits(module))
    args = (x, gamma, beta, y, np.int64(rows), np.int32(channels), np.int32(groups), np.int64(spatial),
            np.float32(eps), np.int32(int(silu)))  # fmt: skip
    workspace = groupnorm_workspace(name, rows, cols)
    if workspace:
        buf = _groupnorm_workspace_buffer(workspace)
        stream = cupy.cuda.get_current_stream()
        cupy.cuda.runtime.memsetAsync(buf.data.ptr, 0xFF, workspace, stream.ptr)
        args += (buf.data.ptr, np.int32(patience))
    fn = module.get_function(name)
    smem = groupnorm_smem(name, dtype, cols, block)
    if smem > fn.max_dynamic_shared_size_bytes:
        fn.max_dynamic_shared_size_bytes = smem
    fn((grid,), (block,), args, shared_mem=smem)
    return name


def library_groupnorm_device(lib: Path) -> tuple[int, int, int] | None:
    """The current device as the built library's GroupNorm launcher sees it, (stage_sms,
    smem_optin, stream_ctas) (its exported ``fusion_groupnorm_device``); None where the runtime
    cannot say.  Needs a GPU."""
    fn = ctypes.CDLL(str(lib)).fusion_groupnorm_device
    fn.argtypes = [ctypes.POINTER(ctypes.c_int)] * 3
    fn.restype = ctypes.c_int
    out = [ctypes.c_int() for _ in range(3)]
    return None if fn(*(ctypes.byref(v) for v in out)) != 0 else tuple(v.value for v in out)


def library_groupnorm_plan(lib: Path, dtype: str, rows: int, cols: int, vec_ok: bool = True, stage_sms: int = 0,
                           smem_optin: int = 0,
                           stream_ctas: int | None = None) -> tuple[str, int, int, int, int] | None:  # fmt: skip
    """The GroupNorm launch (name, grid, block, shared memory bytes, workspace bytes) the built
    library would make (its exported ``fusion_groupnorm_plan``); no GPU needed."""
    fn = ctypes.CDLL(str(lib)).fusion_groupnorm_plan
    c = ctypes
    fn.argtypes = [c.c_int, c.c_longlong, c.c_longlong, c.c_int, c.c_int, c.c_int, c.c_int, c.c_char_p, c.c_int,
                   c.POINTER(c.c_longlong), c.POINTER(c.c_int), c.POINTER(c.c_int), c.POINTER(c.c_longlong)]  # fmt: skip
    fn.restype = c.c_int
    name = c.create_string_buffer(64)
    grid, block, smem, workspace = c.c_longlong(), c.c_int(), c.c_int(), c.c_longlong()
    rc = fn(list(_DTYPE_TAG).index(dtype), rows, cols, int(vec_ok), stage_sms, smem_optin,
            stream_ctas_for(stage_sms, stream_ctas), name, 64, c.byref(grid), c.byref(block), c.byref(smem),
            c.byref(workspace))  # fmt: skip
    return None if rc != 0 else (name.value.decode(), grid.value, block.value, smem.value, workspace.value)


def _main(argv: Sequence[str] | None = None) -> int:
    """``python -m fusion.plugins.library header|build|check LIB`` (the CLI proper is fusion.cli.commands)."""
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="python -m fusion.plugins.library")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("header", help="rewrite plugin_src/generated/plugin_specs.h")
    sub.add_parser("readme", help="rewrite the TRT8 creator table in plugin_src/README.md")
    b = sub.add_parser("build")
    b.add_argument("-o", "--out", type=Path)
    b.add_argument("--arch", action="append")
    b.add_argument("--harness", action="store_true")
    b.add_argument("--trt", type=int, choices=TRT_VERSIONS, default=10)
    b.add_argument("--tensorrt-include", type=Path)
    c = sub.add_parser("check")
    c.add_argument("lib", type=Path)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        if args.cmd == "header":
            LOG.info("wrote %s", write_spec_header())
        elif args.cmd == "readme":
            LOG.info("wrote %s", write_readme_table())
        elif args.cmd == "build":
            LOG.info("%s", build_library(args.out, tuple(args.arch or ("sm_90",)), with_harness=args.harness,
                                         trt=args.trt, tensorrt_include=args.tensorrt_include))  # fmt: skip
        else:
            problems = check_library(args.lib)
            for p in problems:
                LOG.error("%s", p)
            if problems:
                return 1
            LOG.info("%s agrees with the specs", args.lib)
    except PluginBuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
