"""Optimization profiles for TensorRT engines, derived from an ONNX model's symbolic dims.

No TensorRT here: this module turns the user's ranges into concrete min/opt/max shapes per
input (or min/opt/max *values* for shape-tensor inputs) and checks them, so all of it runs
and is tested on CPU.

A profile spec maps names to ranges; a name is either a graph input or a symbolic dim:

    {"input_ids": ([1, 1], [8, 128], [32, 512])}      # an input's min/opt/max shape
    {"batch": (1, 8, 32), "seq": (1, 512)}           # dims: (min, opt, max) or (min, max)
    {"target_shape": ([1, 8], [4, 64], [8, 128])}    # a shape-tensor input: its values

Inputs that share a dim name share its range, so one input's shapes fix the others'.
A list of specs gives several profiles.  On the command line (``parse_profile``):
``input_ids:1x1,8x128,32x512`` and ``batch=1,8,32``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import onnx

from ..errors import EngineBuildError

Shape = tuple[int, ...]
Dim = int | str | None  # static size, symbolic name, or unknown
PROFILE_POINTS = ("min", "opt", "max")

# Where an integer tensor is read as a shape (or shape-like values): (op_type, input indices).
# TensorRT makes a graph input that reaches one of these a shape tensor.
_SHAPE_OPERANDS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,),
    "Expand": (1,),
    "Tile": (1,),
    "ConstantOfShape": (0,),
    "Slice": (1, 2, 3, 4),
    "Range": (0, 1, 2),
    "Resize": (2, 3),
    "Upsample": (1,),
    "Pad": (1,),
    "TopK": (1,),
    "OneHot": (1,),
    "Squeeze": (1,),
    "Unsqueeze": (1,),
    "Split": (1,),
    "ReduceSum": (1,),
    "ReduceMean": (1,),
    "ReduceMax": (1,),
    "ReduceMin": (1,),
    "ReduceProd": (1,),
    "ReduceL2": (1,),
    "Trilu": (1,),
}
# Ops through which a shape-tensor's values flow unchanged in meaning.
_SHAPE_PASSTHROUGH = {"Cast", "Concat", "Gather", "Slice", "Squeeze", "Unsqueeze", "Identity", "Add", "Sub", "Mul",
                      "Div", "Max", "Min", "Abs", "Neg", "Reshape", "Flatten"}
_INT_TYPES = {onnx.TensorProto.INT32, onnx.TensorProto.INT64}


@dataclass(frozen=True)
class InputInfo:
    """A graph input as the profile derivation sees it."""

    name: str
    dims: tuple[Dim, ...]
    elem_type: int = onnx.TensorProto.FLOAT
    shape_tensor: bool = False  # its values, not only its shape, set shapes downstream

    @property
    def dynamic(self) -> bool:
        return self.shape_tensor or any(not isinstance(d, int) for d in self.dims)

    def describe_dim(self, i: int) -> str:
        d = self.dims[i]
        return f"dim {i} ({d!r})" if isinstance(d, str) else f"dim {i} (unnamed)"


@dataclass
class ProfileShapes:
    """One optimization profile: per input, its (min, opt, max) shapes, or values for shape tensors."""

    ranges: dict[str, tuple[Shape, Shape, Shape]] = field(default_factory=dict)
    shape_tensors: frozenset = frozenset()

    def point(self, which: str) -> dict[str, Shape]:
        """The min, opt or max corner: input name -> shape (or values for a shape tensor)."""
        k = PROFILE_POINTS.index(which)
        return {name: r[k] for name, r in self.ranges.items()}

    def contains(self, feed: Mapping[str, Any]) -> bool:
        """Whether every input of ``feed`` (name -> shape, or values for shape tensors) fits."""
        for name, (lo, _, hi) in self.ranges.items():
            if name not in feed:
                return False
            got = tuple(int(v) for v in feed[name])
            if len(got) != len(lo) or any(not a <= g <= b for a, g, b in zip(lo, got, hi)):
                return False
        return True

    def describe(self) -> str:
        return "; ".join(f"{n}: {list(lo)}..{list(hi)}" for n, (lo, _, hi) in self.ranges.items())


# -- reading the model --------------------------------------------------------------------


def model_inputs(model: onnx.ModelProto, shape_tensors: Iterable[str] | None = None) -> list[InputInfo]:
    """The graph inputs (initializers excluded) with their dims; ``shape_tensors``: the inputs
    TensorRT treats as shape tensors, where known (else guessed by :func:`shape_tensor_inputs`)."""
    g = model.graph
    init = {t.name for t in g.initializer}
    st = set(shape_tensors) if shape_tensors is not None else shape_tensor_inputs(model)
    out = []
    for vi in g.input:
        if vi.name in init:
            continue
        tt = vi.type.tensor_type
        dims: list[Dim] = []
        for d in tt.shape.dim:
            if d.HasField("dim_value") and d.dim_value >= 0:
                dims.append(int(d.dim_value))
            else:
                dims.append(d.dim_param or None)
        out.append(InputInfo(vi.name, tuple(dims), tt.elem_type, vi.name in st))
    return out


def shape_tensor_inputs(model: onnx.ModelProto) -> set[str]:
    """Integer inputs of rank <= 1 whose values reach a shape operand (Reshape's shape, ...)."""
    g = model.graph
    init = {t.name for t in g.initializer}
    cands = set()
    for vi in g.input:
        tt = vi.type.tensor_type
        if vi.name not in init and tt.elem_type in _INT_TYPES and len(tt.shape.dim) <= 1:
            cands.add(vi.name)
    if not cands:
        return set()
    consumers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for n in g.node:
        for i, name in enumerate(n.input):
            consumers.setdefault(name, []).append((n, i))
    found = set()
    for name in cands:
        seen, stack = {name}, [name]
        while stack and name not in found:
            t = stack.pop()
            for n, i in consumers.get(t, []):
                if i in _SHAPE_OPERANDS.get(n.op_type, ()):
                    found.add(name)
                    break
                if n.op_type in _SHAPE_PASSTHROUGH:
                    for o in n.output:
                        if o and o not in seen:
                            seen.add(o)
                            stack.append(o)
    return found


# -- parsing the user's ranges ------------------------------------------------------------


def parse_profile(items: Sequence[str]) -> dict[str, Any]:
    """Command-line items of one profile -> a profile spec.

    ``input:AxB,CxD,ExF`` (an input's min,opt,max shapes; values for a shape tensor; one
    shape alone means min = opt = max) and ``dim=MIN,OPT,MAX`` or ``dim=MIN,MAX`` or ``dim=N``.
    """
    spec: dict[str, Any] = {}
    for raw in items:
        for item in _split_items(raw):
            if "=" in item:
                k, v = (s.strip() for s in item.split("=", 1))
                vals = [_int(x, item) for x in v.split(",") if x.strip()]
                if not 1 <= len(vals) <= 3:
                    raise EngineBuildError(f"bad range {item!r}: use dim=MIN,OPT,MAX, dim=MIN,MAX or dim=N")
                spec[_new_key(spec, k, item)] = tuple(vals)
            elif ":" in item:
                k, v = item.rsplit(":", 1)
                shapes = [_shape(s, item) for s in v.split(",")]
                if len(shapes) == 1:
                    shapes *= 3
                if len(shapes) != 3:
                    raise EngineBuildError(f"bad shapes {item!r}: use input:MIN,OPT,MAX with each shape like 1x128")
                spec[_new_key(spec, k.strip(), item)] = tuple(shapes)
            else:
                raise EngineBuildError(f"bad profile item {item!r}: use input:1x1,8x128,32x512 or dim=1,8,32")
    return spec


def _split_items(raw: str) -> list[str]:
    """'a:1x1,2x2,3x3 b=1,2' is two items; commas inside an item stay with it."""
    return [p for p in raw.split() if p]


def _new_key(spec: Mapping[str, Any], key: str, item: str) -> str:
    if not key:
        raise EngineBuildError(f"bad profile item {item!r}: no name")
    if key in spec:
        raise EngineBuildError(f"{key!r} is given twice in one profile")
    return key


def _shape(s: str, item: str) -> Shape:
    s = s.strip()
    if s in ("", "[]", "scalar"):
        return ()
    return tuple(_int(x, item) for x in s.lower().strip("[]").split("x"))


def _int(v: str, item: str) -> int:
    try:
        return int(v)
    except ValueError:
        raise EngineBuildError(f"bad profile item {item!r}: {v!r} is not an integer") from None


# -- derivation ---------------------------------------------------------------------------


def derive_profiles(inputs: Sequence[InputInfo], shapes: Any) -> list[ProfileShapes]:
    """The user's ranges (one spec, or a list of specs for several profiles) -> checked profiles.

    A model without dynamic inputs needs none (returns []).  Raises EngineBuildError when a
    dynamic input has no range, a name is unknown, or a range is inconsistent.
    """
    if shapes is None or (isinstance(shapes, (list, tuple)) and not shapes):
        dyn = [i for i in inputs if i.dynamic]
        if dyn:
            raise EngineBuildError(f"{_missing(dyn[0], None)}; dynamic inputs need an optimization profile")
        return []
    specs = [shapes] if isinstance(shapes, Mapping) else list(shapes)
    return [_derive_one(inputs, _as_spec(s), k, len(specs)) for k, s in enumerate(specs)]


def _as_spec(s: Any) -> Mapping[str, Any]:
    if isinstance(s, str):
        return parse_profile([s])
    if isinstance(s, Mapping):
        return s
    if isinstance(s, (list, tuple)) and all(isinstance(x, str) for x in s):
        return parse_profile(s)
    raise EngineBuildError(f"a profile is a mapping of input or dim names to ranges, not {type(s).__name__}")


def _derive_one(inputs: Sequence[InputInfo], spec: Mapping[str, Any], k: int, n: int) -> ProfileShapes:
    where = f"profile {k}: " if n > 1 else ""
    by_name = {i.name: i for i in inputs}
    dim_names = {d for i in inputs for d in i.dims if isinstance(d, str)}
    unknown = [key for key in spec if key not in by_name and key not in dim_names]
    if unknown:
        raise EngineBuildError(
            f"{where}{unknown[0]!r} is neither an input nor a dim of the model "
            f"(inputs: {', '.join(by_name) or 'none'}; dims: {', '.join(sorted(dim_names)) or 'none'})"
        )
    # Dim ranges: given directly, or read off an input's explicit shapes (checked to agree).
    dims: dict[str, tuple[int, int, int]] = {}
    origin: dict[str, str] = {}
    for key, value in spec.items():
        if key in dim_names and key not in by_name:
            dims[key] = _dim_range(value, f"{where}dim {key!r}")
            origin[key] = f"the range {key}={','.join(map(str, dims[key]))}"
    explicit: dict[str, tuple[Shape, Shape, Shape]] = {}
    for key, value in spec.items():
        if key not in by_name:
            continue
        info = by_name[key]
        triple = _shape_triple(value, f"{where}input {key!r}")
        if info.shape_tensor:
            _check_values(info, triple, where)
        else:
            _check_shapes(info, triple, where)
            for i, d in enumerate(info.dims):
                if not isinstance(d, str):
                    continue
                got = tuple(t[i] for t in triple)
                if d in dims and dims[d] != got:
                    raise EngineBuildError(
                        f"{where}inconsistent ranges for dim {d!r}: input {key!r} gives {_fmt(got)}, "
                        f"{origin[d]} gives {_fmt(dims[d])}"
                    )
                dims.setdefault(d, got)
                origin.setdefault(d, f"input {key!r}")
        explicit[key] = triple
    prof = ProfileShapes(shape_tensors=frozenset(i.name for i in inputs if i.shape_tensor))
    for info in inputs:
        if info.name in explicit:
            prof.ranges[info.name] = explicit[info.name]
        elif info.dynamic:
            if info.shape_tensor or any(d is None for d in info.dims) or any(
                isinstance(d, str) and d not in dims for d in info.dims
            ):
                raise EngineBuildError(where + _missing(info, dims))
            per_dim = [(d, d, d) if isinstance(d, int) else dims[d] for d in info.dims]
            prof.ranges[info.name] = tuple(tuple(r[j] for r in per_dim) for j in range(3))  # type: ignore[assignment]
    return prof


def _missing(info: InputInfo, dims: Mapping[str, Any] | None) -> str:
    if info.shape_tensor:
        return (f"input {info.name!r} is a shape tensor (its values set shapes) and has no range: "
                f"give its values as {info.name}:MIN,OPT,MAX (e.g. {info.name}:1x8,4x64,8x128)")
    dims = dims or {}
    i = next(j for j, d in enumerate(info.dims) if not isinstance(d, int) and d not in dims)
    d = info.dims[i]
    hint = f"{d}=MIN,OPT,MAX or " if isinstance(d, str) else ""
    return f"input {info.name!r} {info.describe_dim(i)} is dynamic and has no range: give {hint}{info.name}:MIN,OPT,MAX"


def _dim_range(value: Any, what: str) -> tuple[int, int, int]:
    vals = [value] if isinstance(value, int) else list(value)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in vals) or not 1 <= len(vals) <= 3:
        raise EngineBuildError(f"{what}: a range is N, (MIN, MAX) or (MIN, OPT, MAX) integers, got {value!r}")
    if len(vals) == 1:
        vals *= 3
    elif len(vals) == 2:  # TensorRT tunes for opt: the top of the range unless told otherwise
        vals = [vals[0], vals[1], vals[1]]
    lo, opt, hi = vals
    if lo < 0:
        raise EngineBuildError(f"{what}: min {lo} is negative")
    if not lo <= opt <= hi:
        raise EngineBuildError(f"{what}: inconsistent range min {lo}, opt {opt}, max {hi} (need min <= opt <= max)")
    return lo, opt, hi


def _shape_triple(value: Any, what: str) -> tuple[Shape, Shape, Shape]:
    try:
        seq = list(value)
        if len(seq) == 3 and all(_is_int_seq(s) for s in seq):
            return tuple(tuple(int(x) for x in s) for s in seq)  # type: ignore[return-value]
        if _is_int_seq(seq):  # one shape: min = opt = max
            t = tuple(int(x) for x in seq)
            return t, t, t
    except TypeError:
        pass
    raise EngineBuildError(f"{what}: give (MIN, OPT, MAX) shapes, each a list of integers, got {value!r}")


def _is_int_seq(s: Any) -> bool:
    try:
        return all(isinstance(x, int) and not isinstance(x, bool) for x in s)
    except TypeError:
        return False


def _check_shapes(info: InputInfo, triple: tuple[Shape, Shape, Shape], where: str) -> None:
    what = f"{where}input {info.name!r}"
    for label, s in zip(PROFILE_POINTS, triple):
        if len(s) != len(info.dims):
            raise EngineBuildError(f"{what}: {label} shape {list(s)} has rank {len(s)}, the input has rank {len(info.dims)}")
    for i, d in enumerate(info.dims):
        lo, opt, hi = (t[i] for t in triple)
        if isinstance(d, int) and (lo, opt, hi) != (d, d, d):
            raise EngineBuildError(f"{what} {info.describe_dim(i)} is static {d}, the profile gives {_fmt((lo, opt, hi))}")
        if lo < 0:
            raise EngineBuildError(f"{what} {info.describe_dim(i)}: min {lo} is negative")
        if not lo <= opt <= hi:
            raise EngineBuildError(
                f"{what} {info.describe_dim(i)}: inconsistent range {_fmt((lo, opt, hi))} (need min <= opt <= max)"
            )


def _check_values(info: InputInfo, triple: tuple[Shape, Shape, Shape], where: str) -> None:
    what = f"{where}shape-tensor input {info.name!r}"
    n = info.dims[0] if info.dims else 1
    for label, s in zip(PROFILE_POINTS, triple):
        if isinstance(n, int) and len(s) != n:
            raise EngineBuildError(f"{what}: {label} values {list(s)} have {len(s)} elements, the input holds {n}")
    if not all(a <= b <= c for a, b, c in zip(*triple)):
        raise EngineBuildError(f"{what}: inconsistent values min {list(triple[0])}, opt {list(triple[1])}, "
                               f"max {list(triple[2])} (need min <= opt <= max elementwise)")


def _fmt(r: Sequence[int]) -> str:
    return "min {}, opt {}, max {}".format(*r)


def find_profile(profiles: Sequence[ProfileShapes], feed: Mapping[str, Any]) -> int | None:
    """Index of the first profile that holds ``feed`` (name -> shape, values for shape tensors)."""
    for k, p in enumerate(profiles):
        if p.contains(feed):
            return k
    return None


def feed_key(feed: Mapping[str, Any], shape_tensors: Iterable[str]) -> dict[str, Shape]:
    """A feed of arrays -> what profiles are matched on: shapes, values for shape tensors."""
    st = set(shape_tensors)
    out = {}
    for name, arr in feed.items():
        out[name] = tuple(int(v) for v in arr.reshape(-1)) if name in st else tuple(int(d) for d in arr.shape)
    return out
