"""Reading and writing models: clear errors for bad input, atomic writes, external data.

Weights are never read to match patterns: models are loaded with their external data left on
disk, and saving streams those bytes to the output's own data file.  Peak memory therefore
tracks the graph, not the weights.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from ..errors import InvalidGraphError, ModelLoadError, OutputError, UnsupportedModelError
from . import view as ir
from .graph import default_opset

log = logging.getLogger(__name__)

MIN_IR_VERSION = 3
MIN_OPSET = 7
PROTOBUF_LIMIT = 2**31 - 1
# External tensors are copied in chunks this big.
_CHUNK = 16 << 20


@dataclass
class LoadedModel:
    proto: onnx.ModelProto
    base_dir: str | None  # directory external data is relative to (None: in-memory model)
    path: Path | None = None


def load(path: str | os.PathLike, load_external_data: bool = False) -> LoadedModel:
    """Parse an ONNX file; raise ModelLoadError with one clear line if it is not one."""
    p = Path(path)
    if not p.exists():
        raise ModelLoadError(f"{p}: no such file")
    if not p.is_file():
        raise ModelLoadError(f"{p}: not a file")
    try:
        data = p.read_bytes()
    except OSError as e:
        raise ModelLoadError(f"{p}: cannot read: {e.strerror}") from e
    if not data:
        raise ModelLoadError(f"{p}: empty file, not an ONNX model")
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise ModelLoadError(f"{p}: not an ONNX model (protobuf parse failed: {e or 'truncated?'})") from e
    if not proto.HasField("graph") or proto.ir_version == 0:
        raise ModelLoadError(f"{p}: not an ONNX model (no graph or IR version)")
    base_dir = str(p.resolve().parent)
    check_external_data(proto, base_dir, p)
    if load_external_data:
        onnx.load_external_data_for_model(proto, base_dir)
        base_dir_used = None
    else:
        base_dir_used = base_dir
    return LoadedModel(proto, base_dir_used, p)


def external_tensors(proto: onnx.ModelProto) -> list[onnx.TensorProto]:
    from onnx.external_data_helper import _get_all_tensors

    return [t for t in _get_all_tensors(proto) if t.data_location == onnx.TensorProto.EXTERNAL]


def check_external_data(proto: onnx.ModelProto, base_dir: str, path: Path | None = None) -> None:
    """Every external tensor's file must exist and be long enough."""
    sizes: dict[str, int] = {}
    for t in external_tensors(proto):
        info = {e.key: e.value for e in t.external_data}
        loc = info.get("location", "")
        where = f"{path}: " if path else ""
        if not loc or os.path.isabs(loc) or ".." in Path(loc).parts:
            raise ModelLoadError(f"{where}tensor {t.name!r} has an invalid external data location {loc!r}")
        full = os.path.join(base_dir, loc)
        if loc not in sizes:
            try:
                sizes[loc] = os.path.getsize(full)
            except OSError:
                raise ModelLoadError(f"{where}missing external data file {loc!r} (tensor {t.name!r})") from None
        end = int(info.get("offset", 0)) + int(info.get("length", 0))
        if end > sizes[loc]:
            raise ModelLoadError(f"{where}external data file {loc!r} is shorter than tensor {t.name!r} needs")


def check_versions(proto: onnx.ModelProto) -> None:
    """IR and default-domain opset versions this library knows."""
    ir_max = onnx.IR_VERSION
    if not MIN_IR_VERSION <= proto.ir_version <= ir_max:
        raise UnsupportedModelError(
            f"IR version {proto.ir_version} is not supported (this library handles {MIN_IR_VERSION}..{ir_max})"
        )
    opset = default_opset(proto.opset_import)
    op_max = onnx.defs.onnx_opset_version()
    if not MIN_OPSET <= opset <= op_max:
        raise UnsupportedModelError(
            f"default-domain opset {opset or 'missing'} is not supported (this library handles {MIN_OPSET}..{op_max})"
        )


def check_graph(g: ir.Graph, where: str = "graph") -> None:
    """Reject duplicate definitions, dangling inputs and cycles, in ``g`` and its subgraphs."""
    if where == "graph" and not g.nodes:
        raise InvalidGraphError("the graph has no nodes")
    for t in g.tensors.values():
        if len(t.inputs) > 1 or (t.inputs and t.name in g.defined):
            raise InvalidGraphError(f"{where}: value {t.name!r} is defined more than once")
        if not t.inputs and t.name not in g.defined:
            user = t.outputs[0] if t.outputs else None
            if user is not None:
                raise InvalidGraphError(f"{where}: node {user.name or user.op!r} reads {t.name!r}, which nothing defines")
            raise InvalidGraphError(f"{where}: output {t.name!r} is not computed by the graph")
    names = Counter(n.name for n in g.nodes if n.name)
    dup = next((n for n, c in names.items() if c > 1), None)
    if dup:
        log.warning("%s: node name %r is used more than once", where, dup)
    _check_acyclic(g, where)
    for n in g.nodes:
        for attr, subs in n.subgraphs.items():
            for sub in subs:
                check_graph(sub, f"{where}/{n.name or n.op}.{attr}")


def _check_acyclic(g: ir.Graph, where: str) -> None:
    """Kahn's algorithm; what a node's subgraphs read from this graph counts as its input.

    Exported graphs are topologically sorted, which one pass proves: then no cycle is possible.
    """
    # (Each value has one producer here: check_graph rejected the rest before.)
    if not any(n.subgraphs for n in g.nodes) and g.producers_first():  # (subgraph reads would need the full walk)
        return
    index = {id(n): i for i, n in enumerate(g.nodes)}
    pending = [0] * len(g.nodes)
    users: list[list[int]] = [[] for _ in g.nodes]
    for i, n in enumerate(g.nodes):
        deps = set()
        for t in _reads(n):
            if t.inputs and id(t.inputs[0]) in index:
                deps.add(index[id(t.inputs[0])])
        pending[i] = len(deps)
        for j in deps:
            users[j].append(i)
    ready = [i for i, c in enumerate(pending) if c == 0]
    done = 0
    while ready:
        i = ready.pop()
        done += 1
        for u in users[i]:
            pending[u] -= 1
            if pending[u] == 0:
                ready.append(u)
    if done != len(g.nodes):
        stuck = next(g.nodes[i] for i, c in enumerate(pending) if c > 0)
        raise InvalidGraphError(f"{where}: the graph has a cycle through node {stuck.name or stuck.op!r}")


def _reads(n: ir.Node):
    yield from n.inputs
    for subs in n.subgraphs.values():
        for sub in subs:
            for g in sub.walk():
                for m in g.nodes:
                    yield from m.inputs


def save(proto: onnx.ModelProto, path: str | os.PathLike, source_dir: str | None = None, in_place: bool = False) -> None:
    """Write ``proto`` to ``path`` atomically; external data goes to ``<name>.data`` beside it.

    ``source_dir`` is where the proto's external references currently resolve.  The output's
    data file is always rewritten (streamed), so the output never shares a file with the input
    and writing over the input itself is safe: where ``<name>.data`` is a file the proto reads
    (the input's own, when fusing in place), the data goes to ``<name>.1.data`` instead, so
    until the model file is renamed the input and its data are untouched.  ``in_place``: the
    proto was read from ``path``; its data files named for it are removed once replaced.
    """
    out = Path(path)
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise OutputError(f"{out}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise OutputError(f"{out}: directory {parent} is not writable")
    if out.is_dir():
        raise OutputError(f"{out}: is a directory")
    ext = external_tensors(proto)
    too_big = not ext and proto.ByteSize() > PROTOBUF_LIMIT - (1 << 20)
    renames: list[tuple[str, Path]] = []  # (temporary file, final name), data files first
    read = _data_files(ext, source_dir)
    try:
        if ext or too_big:
            data = next(d for d in _data_names(out) if d.resolve() not in read)
            fd, tmp = tempfile.mkstemp(prefix=f".{data.name}.", suffix=".tmp", dir=parent)
            renames.append((tmp, data))
            with os.fdopen(fd, "wb") as f:
                proto = _stream_external_data(proto, f, data.name, source_dir)
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=parent)
        renames.append((tmp, out))
        with os.fdopen(fd, "wb") as f:
            f.write(proto.SerializeToString())
            f.flush()
            os.fsync(f.fileno())
        # mkstemp makes 0600 files: give them the mode a plain open() would have.
        mode = _default_mode()
        for tmp, _ in renames:
            os.chmod(tmp, mode)
        # Data file first, model last: a reader never sees a model whose data is missing.
        while renames:
            tmp, final = renames[0]
            os.replace(tmp, final)
            renames.pop(0)
        if in_place:  # the replaced model's own data files are nobody's now
            for stale in read & {d.resolve() for d in _data_names(out, 8)}:
                if not (ext or too_big) or stale != data.resolve():
                    stale.unlink(missing_ok=True)
    except OSError as e:
        raise OutputError(f"{out}: cannot write: {e.strerror}") from e
    finally:
        for tmp, _ in renames:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _data_names(out: Path, n: int | None = None):
    """``<name>.data``, then ``<name>.1.data``, ``<name>.2.data``, ... (``n`` of them, or endless)."""
    yield out.parent / (out.name + ".data")
    i = 1
    while n is None or i < n:
        yield out.parent / f"{out.name}.{i}.data"
        i += 1


def _data_files(ext: list[onnx.TensorProto], source_dir: str | None) -> set[Path]:
    """The files (resolved) the external tensors ``ext`` read."""
    files = set()
    for t in ext:
        loc = next((e.value for e in t.external_data if e.key == "location"), None)
        if loc and source_dir is not None:
            files.add(Path(source_dir, loc).resolve())
    return files


def _default_mode() -> int:
    """0o666 less the umask, read without changing it (os.umask would, for every thread)."""
    try:
        with open("/proc/self/status") as f:
            umask = next(int(ln.split()[1], 8) for ln in f if ln.startswith("Umask:"))
    except (OSError, StopIteration, ValueError):
        umask = os.umask(0o022)
        os.umask(umask)
    return 0o666 & ~umask


def _stream_external_data(proto: onnx.ModelProto, f, data_name: str, source_dir: str | None) -> onnx.ModelProto:
    """A copy of ``proto`` whose external tensors point into ``f`` (the file ``data_name``)."""
    from onnx.external_data_helper import _get_all_tensors

    model = onnx.ModelProto()
    model.CopyFrom(proto)
    # Large embedded tensors move out too when the model would not fit one protobuf.
    move_embedded = model.ByteSize() > PROTOBUF_LIMIT - (1 << 20)
    offset = 0
    for t in _get_all_tensors(model):
        if t.data_location == onnx.TensorProto.EXTERNAL:
            if source_dir is None:
                raise OutputError(f"tensor {t.name!r} has external data but its source directory is unknown")
            info = {e.key: e.value for e in t.external_data}
            src = os.path.join(source_dir, info["location"])
            length = int(info["length"]) if "length" in info else os.path.getsize(src) - int(info.get("offset", 0))
            offset = _pad(f, offset)
            _copy_range(src, int(info.get("offset", 0)), length, f, t.name)
        elif move_embedded and t.HasField("raw_data") and len(t.raw_data) >= 1024:
            offset = _pad(f, offset)
            length = len(t.raw_data)
            f.write(t.raw_data)
            t.ClearField("raw_data")
            t.data_location = onnx.TensorProto.EXTERNAL
        else:
            continue
        del t.external_data[:]
        for k, v in (("location", data_name), ("offset", str(offset)), ("length", str(length))):
            e = t.external_data.add()
            e.key, e.value = k, v
        offset += length
    f.flush()
    os.fsync(f.fileno())
    return model


def _pad(f, offset: int) -> int:
    """Page-align the next tensor, as onnx does, so readers can mmap it."""
    pad = (-offset) % 4096
    f.write(b"\0" * pad)
    return offset + pad


def _copy_range(src: str, start: int, length: int, f, name: str) -> None:
    with open(src, "rb") as s:
        s.seek(start)
        remaining = length
        while remaining > 0:
            chunk = s.read(min(_CHUNK, remaining))
            if not chunk:
                raise OutputError(f"external data of {name!r} ends early in {src}")
            f.write(chunk)
            remaining -= len(chunk)
