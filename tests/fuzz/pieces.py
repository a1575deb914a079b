"""The pieces a fuzz model is stitched from, each knowing how many fusions it must produce.

* :class:`Norm` — LayerNorm / RMSNorm in the forms exporters write (and their traps);
* :class:`TFNorm` — TensorFlow's batch-norm style LayerNorm;
* :class:`FC` — Gemm / MatMul (+ bias) (+ activation);
* :class:`Attention` — softmax(x xᵀ / 4H) x: MatMuls of computed tensors (a trap: never an FC);
* :class:`If`, :class:`Loop`, :class:`Func` — wrap pieces in a control-flow body or a
  model-local function (matching recurses into them: those are true patterns too).

A piece's ``build`` writes its nodes into a container and returns its output plus its
*roles*: every value it computes (and its constants), each with what the fusion count
becomes when that value is also read outside the piece (a :class:`Leak`).  The rules of the
library the counts model:

* a fused subgraph's intermediates may be read only inside it and may not be graph outputs
  (read elsewhere -> that match is refused), but a shorter match may still fuse: a norm whose
  normalized value (before γ/β) leaks fuses without γ/β; an FC whose activation input leaks
  fuses without the activation; a bare MatMul fuses unless its output also feeds a bias Add;
* γ/β that cannot be folded (not constant, varying along a non-normalized axis, growing the
  output's rank) stay outside: the norm still fuses; a TensorFlow-form norm cannot leave them
  outside (γ scales x and the mean separately), so it does not fuse at all;
* mean and variance over different axes, Pow(·, 3), a non-constant ε, a variance reduced
  with keepdims=0 and not (or wrongly) restored: no fusion; an RMS rule never takes a centered
  input;
* what the library knows of shapes is what ONNX shape inference gives (:data:`Value.known`):
  nothing inside a model-local function, no shape for a Loop's outputs (a rank-2 Gemm gives
  back [unk, N] at opset >= 13, an If its branches' declared shapes).  Without the rank, no
  positive or non-trailing axes and no restore check; without the dims, the normalized size
  must come from the γ/β the match takes; and a γ/β with more dims than the normalized ones
  stays outside (it could grow an input of unknown rank);
* types (target plugin): a norm computing in fp64 fuses only with fp16 in and out (then in
  fp32); below opset 15 every node of a custom op takes one element type (one function body
  serves them: :func:`tests.fuzz.spec.admitted` says which chain is refused).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from onnx import helper

from .builder import (
    BOOL,
    DOUBLE,
    FLOAT,
    FLOAT16,
    FULL,
    FUNCTION_DOMAIN,
    INT64,
    LEAD,
    NONE,
    NP,
    Container,
    Value,
    broadcast,
    merge_known,
)

SQRT2 = 1.4142135
CORE, POST, CONST, OUTSIDE = "core", "post", "const", "outside"
# Computed from constants only: read elsewhere, the fusion folds its own copy (the gemm rule's
# weight chain, issue 13) and the node stays for that reader.
FOLDED = "folded"


@dataclass(frozen=True)
class Leak:
    """Read one of a piece's values outside it: ``spy`` (another node, its result a graph
    output), ``output`` (the value itself a graph output) or ``body`` (read inside an If)."""

    kind: str
    index: int


# (absorb, cut, extend) -> the (type, takes the Cast before it, takes its own leading Cast)
# of each match the library tries, in order: ``absorb``: the type a Cast just before the
# piece reads, when the match may take that Cast in; ``cut``: the next piece took this one's
# final Cast; ``extend``: the type the next piece's leading Cast makes, when this one may end
# with it (see Norm.alternatives).
Alts = Callable[[int, bool, int], tuple]


@dataclass
class Role:
    value: Value
    kind: str  # core | post | const | outside: how a leak of it changes the count
    count: int | None = None  # post: the count of the shorter match that then fuses, if not the piece's
    ends: list | None = None  # post (norms): where a match ending here can end (see Norm.alternatives)
    alts: Alts | None = None  # post: the fused node's types then (Built.alts), if not the piece's


@dataclass
class Built:
    y: Value
    rule: str
    count: int  # fusions when nothing leaks
    roles: list[Role] = field(default_factory=list)
    inner: dict[str, int] = field(default_factory=dict)  # counts of nested pieces (wrappers)
    input_known: str = FULL  # what shape inference knows of the piece's input
    # Below opset 15 a custom op's function body serves one element type (spec.admitted):
    # the op this piece's fusion emits and the types its node may take, preferred first.
    op: str = ""
    alts: Alts | None = None
    # A float Cast just before this piece may become part of its match (norms: cast(x)), and
    # a norm ending in a Cast back to the model's type ends the way the next piece may take.
    takes_cast: bool = False
    ends_in_cast: int = 0  # the type that Cast reads, if so
    leads_with_cast: int = 0  # the piece starts with a Cast of x to this type, which the previous norm may end with

    def alternatives(self, role: Role | None) -> Alts | None:
        """The fused node's types when ``role``'s value is also read outside (None: nothing is)."""
        return self.alts if role is None or role.alts is None else role.alts

    def leaked(self, role: Role) -> int:
        if role.kind == CORE:
            return 0
        return self.count if role.count is None else min(role.count, self.count)


_WIDTH = {FLOAT16: 16, FLOAT: 32, DOUBLE: 64}


def same_type_alts(t: int, where: str) -> Alts:
    """The types a norm computing in its input's type ``t`` may take (spec.admitted): wider
    when it takes in a Cast before it (``absorb``) or ends with the next piece's (``extend``)."""

    def alts(absorb: int = 0, cut: bool = False, extend: int = 0) -> tuple:
        if where == "function":  # (untyped: cast to the chain's type)
            return ((t, bool(absorb), False),)
        out = []
        for end in ((extend,) if extend else ()) + (t,):
            if absorb:
                out.append((wider(absorb, t, end), True, False))
            out.append((wider(t, end), False, False))
        return tuple(e for e in out if e[0] != DOUBLE)

    return alts


def wider(*types: int) -> int:
    return max(types, key=_WIDTH.__getitem__)


def _arith(c: Container, op: str, a: str, b: str, swap: bool) -> str:
    return c.op(op, b, a) if swap else c.op(op, a, b)


def _reduced(shape: tuple, axes: list[int]) -> tuple:
    rank = len(shape)
    return tuple(1 if (i - rank) in axes else d for i, d in enumerate(shape))


# -- norms ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Norm:
    kind: str = "layer"  # layer | rms
    square: str = "pow"  # pow | mul
    normalize: str = "div"  # div | reciprocal | div_one | pow_half
    gamma: str = "const"  # none | const | input | other_axis | grow
    gshape: str = "full"  # γ/β shape: full (the normalized dims) | last ([H]) | padded (leading 1s)
    beta: str = "const"  # none | const | input  (layer only)
    eps: str = "init"  # init | node | none | input
    eps_value: float = 1e-5
    axes: str = "last"  # last | last2 | channel (axis 1 of a rank-4 input)
    positive: bool = False
    swap: bool = False  # operands of Add/Mul in the other order
    island: int = 0  # compute in this type inside the chain (fp16 models upcast); 0: none
    island_end: str = "before"  # the cast back: before γ | between γ and β | after β
    var_mean: bool = False  # layer: the variance centers x again with its own mean (torch.var)
    restore: str = "keep"  # keep | unsqueeze | reshape (keepdims=0 put back) | none | wrong (traps)
    trap: str = "none"  # none | pow3 | var_axis | center_axis
    leak: Leak | None = None

    @property
    def rule(self) -> str:
        return "layernorm" if self.kind == "layer" else "rmsnorm"

    def norm_axes(self, rank: int) -> list[int]:
        return {"last": [-1], "last2": [-2, -1], "channel": [1 - rank]}[self.axes]

    def param_shape(self, shape: tuple, grow: bool = False) -> tuple:
        rank = len(shape)
        axes = self.norm_axes(rank)
        first = rank + axes[0]
        full = tuple(shape[first:]) if self.axes != "channel" else (shape[1],) + (1,) * (rank - 2)
        if grow:
            return (1,) * (rank + 1 - len(full)) + full
        if self.gshape == "last" and self.axes != "channel":
            return (shape[-1],)
        if self.gshape == "padded":
            return (1,) * (rank - len(full)) + full if rank > len(full) else full
        return full

    def count(self, x: Value, params: int = 2, out: int | None = None, where: str = "main", t_in: int | None = None) -> int:
        """Fusions of this norm; ``params``: how many of γ, β (in chain order) the match may
        take (a leak after the normalization leaves them outside); ``out``: the type of the
        value the match then ends at, where known; ``t_in``: its input's, if not x's."""
        n = self._count(x, params)
        return n if n and self.node_type(x, params, out, where, t_in) is not None else 0

    def end_type(self, x: Value, params: int, out: int | None) -> int:
        """The type of the value a match taking up to ``params`` of γ, β ends at."""
        if not self.island:
            return x.dtype if out is None else out
        # The match stops before the first γ/β it cannot take; it ends at the Cast back to the
        # model's type only if that comes before where it stops.
        consumed = params
        for j, how in enumerate((self.gamma, self.beta if self.kind == "layer" else "none")[:params]):
            pshape = self.param_shape(x.shape)
            if how != "none" and (how != "const" or (x.known == NONE and len(pshape) > len(self.norm_axes(x.rank)))):
                consumed = j
                break
        if out is None or consumed < params:
            cast_at = {"before": 0, "between": 1, "after": 2}[self.island_end]
            out = x.dtype if cast_at <= consumed else self.island
        return out

    def node_type(self, x: Value, params: int = 2, out: int | None = None, where: str = "main", t_in: int | None = None) -> int | None:
        """The element type of the fused node's X (its T, functions.Use.elem_type), or None
        where target plugin refuses the chain (patterns/_norm.emit mirrored): the node computes
        in the wider of its input's and output's types, and a chain computing in fp64 fuses
        only with fp16 in and out (then in fp32); the plugins have no fp64 (issue 16, defect 5)."""
        mt = x.dtype
        if where == "function":  # the input is untyped: cast to the chain's widest type
            t = wider(self.island or mt, mt)
            return None if t == DOUBLE else t
        t_in = t_in or mt
        end = self.end_type(x, params, out)
        t = wider(t_in, end)
        if wider(t, self.island or t) == DOUBLE:
            return FLOAT16 if t_in == end == FLOAT16 else None
        return t

    def alternatives(self, x: Value, ends: list, where: str, t_in: int | None = None, absorb: int = 0) -> tuple:
        """The matches the library tries for a chain that can end at any of ``ends`` ((params,
        type) in chain order), in its order: the latest end first; at each, the match that takes
        in a Cast just before x (reading type ``absorb``) first, then the one that does not (and
        for an RMS norm whose input is cast, the one that starts after that Cast).  Returns
        (the fused node's type, whether it took the Cast before x) for each the plugin target
        accepts."""
        own_cast = bool(self.kind == "rms" and self.island and t_in is None)
        out = []
        for p, o in reversed(ends):
            if not self._count(x, p):
                continue
            if absorb and t_in is None and not own_cast:
                out.append((self.node_type(x, p, o, where, absorb), True, False))
            out.append((self.node_type(x, p, o, where, t_in), False, own_cast))
            if own_cast:
                out.append((self.node_type(x, p, o, where, self.island), False, False))
        return tuple(e for e in out if e[0] is not None)

    def _count(self, x: Value, params: int = 2) -> int:
        if self.trap != "none" or self.eps == "input" or self.restore in ("none", "wrong"):
            return 0
        if x.known == FULL:
            return 1
        # Without the input's rank: nothing for positive or non-trailing axes, no shapes to check
        # a restore with.  Without its dims (LEAD: all but the last): the normalized size
        # must come from the γ/β the fusion takes.
        if x.known == NONE and (self.positive or self.axes == "channel" or self.restore != "keep"):
            return 0
        axes = self.norm_axes(x.rank)
        taken = []  # γ then β, up to the first that cannot be folded
        for how in (self.gamma, self.beta if self.kind == "layer" else "none")[:params]:
            if how == "none":
                continue
            pshape = self.param_shape(x.shape)
            # (with the rank unknown, more dims than the normalized ones could grow the input)
            if how != "const" or (x.known == NONE and len(pshape) > len(axes)):
                break
            taken.append(pshape)
        static = {-1} if x.known == LEAD else set()
        sized = all(a in static or any(len(p) >= -a and p[a] != 1 for p in taken) for a in axes)
        return 1 if sized else 0

    def build(self, c: Container, x: Value, where: str) -> Built:
        rank = x.rank
        axes = self.norm_axes(rank)
        written = [a + rank for a in axes] if self.positive else axes
        other = [-2]  # the axis traps reduce over instead
        mt = x.dtype
        ct = self.island or mt
        roles: list[Role] = []

        def role(name: str, dtype: int, shape: tuple, kind: str) -> str:
            roles.append(Role(Value(name, dtype, shape), kind))
            return name

        red = _reduced(x.shape, axes)
        cast_role = None
        if self.kind == "layer":
            mean = role(c.reduce_mean(x.name, written), mt, red, CORE)
            d = role(c.op("Sub", x.name, mean), mt, x.shape, CORE)
            if self.island:
                d = role(c.op("Cast", d, to=ct), ct, x.shape, CORE)
            vd = d
            if self.var_mean or self.trap == "center_axis":
                vaxes = other if self.trap == "center_axis" else written
                vm = role(c.reduce_mean(x.name, vaxes), mt, _reduced(x.shape, other if self.trap == "center_axis" else axes), CORE)
                vd = role(c.op("Sub", x.name, vm), mt, x.shape, CORE)
                if self.island:
                    vd = role(c.op("Cast", vd, to=ct), ct, x.shape, CORE)
        else:
            src = x.name
            if self.trap == "center_axis":
                m2 = role(c.reduce_mean(x.name, other), mt, _reduced(x.shape, other), CORE)
                src = role(c.op("Sub", x.name, m2), mt, x.shape, CORE)
            d = src
            if self.island:
                # Cast(x) read elsewhere: the norm fuses from the Cast's output (it is not part of
                # the match); from an fp64 one, not at all (target plugin).
                d = c.op("Cast", src, to=ct)
                cast_role = Role(Value(d, ct, x.shape), POST, self.count(x, 2, None, where, t_in=ct))
                roles.append(cast_role)
            vd = d
        if self.square == "mul":
            sq = c.op("Mul", vd, vd)
        else:
            sq = c.op("Pow", vd, c.scalar(3.0 if self.trap == "pow3" else 2.0, ct))
        role(sq, ct, x.shape, CORE)
        vaxes = [a for a in (other if self.trap == "var_axis" else written)]
        vred = _reduced(x.shape, other if self.trap == "var_axis" else axes)
        if self.restore == "keep":
            var = role(c.reduce_mean(sq, vaxes), ct, vred, CORE)
        else:
            flat = role(c.reduce_mean(sq, vaxes, keepdims=0), ct, tuple(d for i, d in enumerate(x.shape) if i - rank not in axes), CORE)
            if self.restore == "unsqueeze":
                var = c.unsqueeze(flat, [a + rank for a in axes])
            elif self.restore == "reshape":
                var = c.op("Reshape", flat, c.ints([1 if i - rank in axes else 0 for i in range(rank)]))
            elif self.restore == "wrong":  # [B, S] -> [B, 1, S]: broadcasts only because S == H
                var = c.unsqueeze(flat, [rank - 2])
                vred = (*x.shape[:-2], 1, x.shape[-2])
            else:  # none: [B, S] broadcasts against [B, S, H] only because S == H
                var = flat
                vred = tuple(d for i, d in enumerate(x.shape) if i - rank not in axes)
            if self.restore != "none":
                role(var, ct, vred, CORE)
        if self.eps == "none":
            ve = var
        else:
            if self.eps == "input":
                e = c.mb.graph_input("eps", ct, (), kind="eps").name
            else:
                e = c.scalar(self.eps_value, ct, node=self.eps == "node")
                role(e, ct, (), CONST)
            ve = role(_arith(c, "Add", var, e, self.swap), ct, vred, CORE)
        if self.normalize == "pow_half":
            inv = role(c.op("Pow", ve, c.scalar(-0.5, ct)), ct, vred, CORE)
            n = _arith(c, "Mul", d, inv, self.swap)
        else:
            s = role(c.op("Sqrt", ve), ct, vred, CORE)
            if self.normalize == "div":
                n = c.op("Div", d, s)
            elif self.normalize == "reciprocal":
                n = _arith(c, "Mul", d, role(c.op("Reciprocal", s), ct, vred, CORE), self.swap)
            else:
                one = role(c.scalar(1.0, ct), ct, (), CONST)
                n = _arith(c, "Mul", d, role(c.op("Div", one, s), ct, vred, CORE), self.swap)
        shape = broadcast(x.shape, vred)
        ends: list[tuple[int, int]] = []  # where a match can end: (γ/β taken, the type there)

        def end(params: int, dtype: int) -> list:
            ends.append((params, dtype))
            return list(ends)

        roles.append(Role(Value(n, ct, shape), POST, self.count(x, 0, ct, where), end(0, ct)))
        y, yt = n, ct
        cast = None  # the Cast back: (its output, its end)
        # Where the island casts back to the model's type: before γ (LLaMA), after β, or between.
        cast_at = {"before": 0, "between": 1, "after": 2}[self.island_end] if self.island else -1
        rng = c.mb.rng
        for i, which in enumerate(("gamma", "beta")):
            if i == cast_at:
                y, yt = c.op("Cast", y, to=mt), mt
                roles.append(Role(Value(y, mt, shape), POST, self.count(x, i, mt, where), end(i, mt)))
                cast = (y, ends[-1])
            how = getattr(self, which)
            if which == "beta" and self.kind != "layer":
                continue
            if how == "none":
                continue
            if how == "input":
                p = c.mb.graph_input(which, yt, self.param_shape(x.shape), kind="param")
                pname, pshape = p.name, p.shape
            else:
                if how == "other_axis":  # varies along axis -2, which is not normalized
                    pshape = (x.shape[-2], x.shape[-1])
                else:
                    pshape = self.param_shape(x.shape, grow=how == "grow")
                scale = 0.5 if which == "gamma" else 0.2
                # In the model's type even inside the island: the fused node computes in the
                # type of its input and output and rounds γ/β to it (within an ulp of the
                # result), which the float64 comparison would otherwise see.
                value = (rng.standard_normal(pshape) * scale + (1.0 if which == "gamma" else 0.0)).astype(NP[mt]).astype(NP[yt])
                pname = role(c.const(value, hint=which), yt, pshape, CONST)
            y = _arith(c, "Mul" if which == "gamma" else "Add", y, pname, self.swap)
            shape = broadcast(shape, pshape)
            roles.append(Role(Value(y, yt, shape), POST, self.count(x, i + 1, yt, where), end(i + 1, yt)))
        if cast_at == 2:
            y = role(c.op("Cast", y, to=mt), mt, shape, POST)
            roles[-1].ends = end(2, mt)
            cast = (y, ends[-1])
        roles[-1].kind = POST  # the root: readable anywhere
        # The Cast back, when nothing comes after it: the next piece may take it in.
        final = cast[1] if cast is not None and cast[0] == y else None

        def alts(upto: list, t_in: int | None = None) -> Alts:
            def f(absorb: int = 0, cut: bool = False, extend: int = 0) -> tuple:
                e = [p for p in upto if not (cut and p is final)]
                if extend and upto is whole and reaches:  # the next piece's Cast of x, as its end
                    e.append((e[-1][0], extend))
                return self.alternatives(x, e, where, t_in, absorb)

            return f

        whole = list(ends)
        # The match reaches the piece's last node unless a γ/β it cannot take stops it.
        reaches = final is None and all(
            how in ("none", "const") and not (x.known == NONE and len(self.param_shape(x.shape)) > len(axes))
            for how in (self.gamma, self.beta if self.kind == "layer" else "none")
        )
        for r in roles:
            if r.ends is not None:
                r.alts = alts(r.ends)
        if cast_role is not None:
            cast_role.alts = alts(list(ends), ct)
        built = Built(Value(y, mt, shape, x.known), self.rule, self.count(x, where=where), roles)
        built.op = "FusedLayerNorm" if self.kind == "layer" else "FusedRMSNorm"
        built.alts = alts(whole)
        built.takes_cast = self.kind == "layer" or not self.island
        # An RMS norm's leading Cast reads x alone: the previous norm may end with it.
        built.leads_with_cast = self.island if self.kind == "rms" and self.island and self.trap != "center_axis" else 0
        built.ends_in_cast = self.island if final is not None else 0
        return built


@dataclass(frozen=True)
class TFNorm:
    """tf2onnx's Keras LayerNormalization: x·(γ·rsqrt(var+ε)) + (β − mean·γ·rsqrt(var+ε))."""

    square: str = "mul"  # mul | pow
    inverse: str = "reciprocal"  # reciprocal | pow_half
    gamma: str = "const"  # none | const | input
    shift: str = "beta"  # beta | beta_input | neg | sub
    eps: str = "init"  # init | node | input
    eps_value: float = 1e-3
    positive: bool = False
    swap: bool = False
    trap: str = "none"  # none | pow3
    leak: Leak | None = None

    rule = "layernorm"

    def count(self, x: Value) -> int:
        if self.trap != "none" or self.eps == "input" or self.gamma == "input" or self.shift == "beta_input":
            return 0
        if x.known == NONE and (self.positive or (self.gamma == "none" and self.shift != "beta")):
            return 0
        return 1

    def build(self, c: Container, x: Value, where: str) -> Built:
        rank, t, shape = x.rank, x.dtype, x.shape
        ax = [rank - 1] if self.positive else [-1]
        red = _reduced(shape, [-1])
        roles: list[Role] = []

        def role(name: str, shp: tuple, kind: str = CORE) -> str:
            roles.append(Role(Value(name, t, shp), kind))
            return name

        rng = c.mb.rng
        mean = role(c.reduce_mean(x.name, ax), red)
        d = role(c.op("Sub", x.name, mean), shape)
        if self.square == "mul":
            sq = c.op("Mul", d, d)
        else:
            sq = c.op("Pow", d, c.scalar(3.0 if self.trap == "pow3" else 2.0, t))
        var = c.reduce_mean(role(sq, shape), ax)
        if self.eps == "input":
            e = c.mb.graph_input("eps", t, (), kind="eps").name
        else:
            e = role(c.scalar(self.eps_value, t, node=self.eps == "node"), (), CONST)
        ve = role(_arith(c, "Add", role(var, red), e, self.swap), red)
        if self.inverse == "reciprocal":
            inv = c.op("Reciprocal", role(c.op("Sqrt", ve), red))
        else:
            inv = c.op("Pow", ve, c.scalar(-0.5, t))
        scale = role(inv, red)
        sshape = red
        if self.gamma != "none":
            if self.gamma == "input":
                g = c.mb.graph_input("gamma", t, (shape[-1],), kind="param").name
            else:
                g = role(c.const((rng.standard_normal(shape[-1]) * 0.5 + 1).astype(NP[t]), hint="gamma"), (shape[-1],), CONST)
            scale = role(_arith(c, "Mul", inv, g, self.swap), shape)
            sshape = shape
        xs = role(_arith(c, "Mul", x.name, scale, self.swap), shape)
        ms = role(_arith(c, "Mul", mean, scale, self.swap), sshape)
        if self.shift in ("beta", "beta_input"):
            if self.shift == "beta_input":
                b = c.mb.graph_input("beta", t, (shape[-1],), kind="param").name
            else:
                b = role(c.const((rng.standard_normal(shape[-1]) * 0.2).astype(NP[t]), hint="beta"), (shape[-1],), CONST)
            y = _arith(c, "Add", xs, role(c.op("Sub", b, ms), shape), self.swap)
        elif self.shift == "neg":
            y = _arith(c, "Add", xs, role(c.op("Neg", ms), sshape), self.swap)
        else:
            y = c.op("Sub", xs, ms)
        role(y, shape, POST)
        return Built(Value(y, t, shape, x.known), self.rule, self.count(x), roles, op="FusedLayerNorm",
                     alts=same_type_alts(t, where), takes_cast=True)  # fmt: skip


# -- fully connected -----------------------------------------------------------------------


ACTIVATIONS = (
    "none",
    "relu",
    "gelu_op",
    "gelu_op_tanh",
    "erf_torch",
    "erf_half_first",
    "erf_inner_half",
    "erf_div2",
    "tanh_pow",
    "tanh_cube",
    "erf_wrong",  # x / 2 inside erf: not a GELU (the FC fuses without it)
)


@dataclass(frozen=True)
class FC:
    form: str = "matmul_add"  # matmul_add | matmul | gemm
    n: int = 0  # output features (0: as many as input features)
    trans_a: bool = False  # gemm: x comes transposed
    trans_b: bool = False  # gemm: W stored [N, K]
    alpha: float = 1.0
    beta: float = 1.0
    bias: str = "n"  # none | scalar | n | 1n | 11n | rows
    bias_first: bool = False  # Add(b, MatMul)
    w_transpose: bool = False  # W stored [N, K] behind Transpose(perm=[1, 0])
    w_node: bool = False  # W from a Constant node
    act: str = "none"
    trap: str = "none"  # none | weight_input | left_const
    leak: Leak | None = None

    rule = "gemm"

    def count(self) -> int:
        if self.trap != "none":
            return 0
        if self.form == "gemm" and self.bias == "rows" and self.beta != 0.0:  # (beta 0: C is not read)
            return 0
        return 1

    def build(self, c: Container, x: Value, where: str) -> Built:
        t = x.dtype
        np_t = NP[t]
        rng = c.mb.rng
        k = x.shape[-1]
        n = self.n or k
        roles: list[Role] = []
        count = self.count()

        def role(name: str, shp: tuple, kind: str, dtype: int = t) -> str:
            roles.append(Role(Value(name, dtype, shp), kind))
            return name

        if self.trap == "left_const":  # W @ x: the constant is the left operand
            m = x.shape[-2]
            w = c.const((rng.standard_normal((m, m)) / np.sqrt(m)).astype(np_t), node=self.w_node, hint="w")
            y = role(c.op("MatMul", w, x.name), x.shape, POST)
            if self.bias != "none":
                y = role(c.op("Add", y, c.const(rng.standard_normal(k).astype(np_t) * 0.1, hint="b")), x.shape, POST)
            # (W [M, M] @ x: ONNX knows [M, H] from W once it knows x's rank)
            return Built(Value(y, t, x.shape, FULL if x.known == LEAD else x.known), self.rule, 0, roles)

        out_shape = x.shape[:-1] + (n,)
        w_value = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np_t)
        stored_nk = (self.trans_b if self.form == "gemm" else False) ^ self.w_transpose
        stored = np.ascontiguousarray(w_value.T) if stored_nk else w_value
        if self.trap == "weight_input":
            w = c.mb.graph_input("w", t, stored.shape, kind="weight").name
        else:
            w = role(c.const(stored, node=self.w_node, hint="w"), stored.shape, CONST)
        if self.w_transpose:
            w = role(c.op("Transpose", w, perm=[1, 0]), stored.shape[::-1], CORE if self.trap == "weight_input" else FOLDED)

        b_vals = (rng.standard_normal(n) * 0.2).astype(np_t)
        xin, lead = x.name, x.shape[:-1]
        if self.form == "gemm":
            rows = x.shape[0] if x.rank == 2 else -1
            if x.rank > 2:  # GPT-2's Conv1D: addmm on [B*S, K], viewed back as [B, S, N]
                xin = role(c.op("Reshape", xin, c.ints([-1, k])), (-1, k), OUTSIDE)
            if self.trans_a:
                xin = role(c.op("Transpose", xin, perm=[1, 0]), (k, rows), OUTSIDE)
            bias = self._bias(rng, n, np_t, b_vals, rows, 2)
            inputs = [xin, w]
            if bias is not None:
                inputs.append(role(c.const(bias, hint="b"), bias.shape, CONST))
            attrs = {"transA": int(self.trans_a), "transB": int(self.trans_b)}
            if self.alpha != 1.0:
                attrs["alpha"] = self.alpha
            if self.beta != 1.0:
                attrs["beta"] = self.beta
            y = role(c.op("Gemm", *inputs, **attrs), (rows, n), POST)
            if x.rank > 2:
                if all(isinstance(d, int) for d in lead[1:]):
                    target = c.ints([-1, *lead[1:], n])
                else:
                    shp = c.op("Shape", x.name)
                    head = c.op("Slice", shp, c.ints([0]), c.ints([-1]))
                    target = c.op("Concat", head, c.ints([n]), axis=0)
                y = role(c.op("Reshape", y, target), out_shape, POST)
        else:
            y = c.op("MatMul", xin, w)
            if self.form == "matmul_add":
                role(y, out_shape, CORE)  # read elsewhere, the bias Add cannot be taken with it
                bias = self._bias(rng, n, np_t, b_vals, x.shape[-2], max(x.rank, 2))
                b = role(c.const(bias, hint="b"), bias.shape, CONST)
                y = c.op("Add", b, y) if self.bias_first else c.op("Add", y, b)
                out_shape = broadcast(out_shape, bias.shape)
            role(y, out_shape, POST)
        y = self._activation(c, y, t, out_shape, role)
        roles[-1].kind = POST
        known = _fc_known(self, x.known, x.rank, c.opset) if where != "function" else NONE
        return Built(Value(y, t, out_shape, known), self.rule, count, roles)

    def _bias(self, rng, n: int, np_t, b_vals, rows, out_rank: int) -> np.ndarray | None:
        """The bias (Gemm's C) in the shape ``self.bias`` names; "rows" varies along rows too."""
        kind = self.bias
        if kind == "none":
            return None if self.form == "gemm" else b_vals
        if kind == "scalar":
            return np.array(0.25, np_t)
        if kind == "1n":
            return b_vals.reshape(1, n)
        if kind == "11n":
            return b_vals.reshape((1,) * (out_rank - 1) + (n,))
        if kind == "rows":
            if not isinstance(rows, int) or rows < 1:
                raise ValueError("generator bug: a bias varying along rows needs a static row count")
            return (rng.standard_normal((rows, n)) * 0.2).astype(np_t)
        return b_vals

    def _activation(self, c: Container, y: str, t: int, shape: tuple, role: Callable) -> str:
        act = self.act

        def k(v: float) -> str:
            return c.scalar(v, t)

        def r(name: str) -> str:
            return role(name, shape, POST)

        def erf_one(divisor: float = SQRT2, mul: bool = False) -> str:
            arg = r(c.op("Mul", y, k(0.70710678))) if mul else r(c.op("Div", y, k(divisor)))
            return r(c.op("Add", r(c.op("Erf", arg)), k(1.0)))

        def tanh_one(cube: str) -> str:
            y3 = r(c.op("Pow", y, k(3.0))) if cube == "pow" else r(c.op("Mul", r(c.op("Mul", y, y)), y))
            inner = r(c.op("Add", y, r(c.op("Mul", k(0.044715), y3))))
            return r(c.op("Add", k(1.0), r(c.op("Tanh", r(c.op("Mul", k(0.7978845608), inner))))))

        if act == "none":
            return y
        if act == "relu":
            return c.op("Relu", y)
        if act == "gelu_op":
            return c.op("Gelu", y)
        if act == "gelu_op_tanh":
            return c.op("Gelu", y, approximate="tanh")
        if act == "erf_torch":
            return c.op("Mul", r(c.op("Mul", y, erf_one())), k(0.5))
        if act == "erf_half_first":
            return c.op("Mul", r(c.op("Mul", k(0.5), y)), erf_one())
        if act == "erf_inner_half":
            return c.op("Mul", y, r(c.op("Mul", k(0.5), erf_one(mul=True))))
        if act == "erf_div2":
            return c.op("Div", r(c.op("Mul", y, erf_one())), k(2.0))
        if act == "tanh_pow":
            return c.op("Mul", r(c.op("Mul", y, k(0.5))), tanh_one("pow"))
        if act == "tanh_cube":
            return c.op("Mul", k(0.5), r(c.op("Mul", y, tanh_one("mul"))))
        if act == "erf_wrong":
            return c.op("Mul", r(c.op("Mul", y, erf_one(divisor=2.0))), k(0.5))
        raise ValueError(act)


@dataclass(frozen=True)
class Attention:
    """softmax(x @ xᵀ / 4H) @ x: products of two computed tensors are never FCs."""

    softmax: bool = True  # (the strategies always draw it: see strategies.pieces)
    leak: Leak | None = None

    rule = "gemm"

    def build(self, c: Container, x: Value, where: str) -> Built:
        perm = list(range(x.rank - 2)) + [x.rank - 1, x.rank - 2]
        xt = c.op("Transpose", x.name, perm=perm)
        # Scaled (x xᵀ / 4H): softmax does not saturate (rows of its output all equal make the
        # next normalization over that axis 0/0), and without softmax fp16 does not overflow.
        s = c.op("Div", c.op("MatMul", x.name, xt), c.scalar(float(x.shape[-1]) * 4, x.dtype))
        if self.softmax:
            s = c.op("Softmax", s, axis=-1)
        y = c.op("MatMul", s, x.name)
        sq = x.shape[:-1] + (x.shape[-2],)
        roles = [Role(Value(xt, x.dtype, x.shape[:-2] + (x.shape[-1], x.shape[-2])), CORE), Role(Value(s, x.dtype, sq), CORE), Role(Value(y, x.dtype, x.shape), POST)]
        return Built(Value(y, x.dtype, x.shape, x.known), self.rule, 0, roles)


# -- wrappers ------------------------------------------------------------------------------


@dataclass(frozen=True)
class If:
    """then: pieces, else: other pieces (or x as it is); both read x from the outer graph."""

    then: tuple = ()
    other: tuple = ()
    outer_consts: bool = False  # the branches' constants are main-graph initializers

    leak = None
    rule = ""

    def build(self, c: Container, x: Value, where: str) -> Built:
        from .spec import build_sequence

        inner: dict[str, int] = {}
        branches = []
        for label, steps in (("then", self.then), ("else", self.other)):
            body = Container(c.mb, "body", outer_consts=self.outer_consts, parent=c)
            y, counts = build_sequence(body, x, steps, "body")
            if y.name == x.name:
                y = Value(body.op("Identity", x.name), x.dtype, x.shape, x.known)
            for r, n in counts.items():
                inner[r] = inner.get(r, 0) + n
            out = helper.make_tensor_value_info(y.name, y.dtype, list(y.shape))
            branches.append(helper.make_graph(body.nodes, c.mb.fresh(label), [], [out], body.initializers))
        cond = c.mb.graph_input("cond", BOOL, (), kind="bool").name
        y = c.op("If", cond, then_branch=branches[0], else_branch=branches[1])
        # The library scans a node's bodies in the order of its attributes, which
        # helper.make_node sorts by name: else_branch before then_branch.
        c.bodies[-2:] = c.bodies[-2:][::-1]
        # ONNX infers the If's output from the branches' declared outputs: known again.
        return Built(Value(y, x.dtype, x.shape, FULL), "", 0, [], inner)


@dataclass(frozen=True)
class Loop:
    """The pieces as a Loop body over a loop-carried value, run twice."""

    body: tuple = ()
    outer_consts: bool = False

    leak = None
    rule = ""

    def build(self, c: Container, x: Value, where: str) -> Built:
        from .spec import build_sequence

        body = Container(c.mb, "body", outer_consts=self.outer_consts, parent=c)
        i = c.mb.fresh("iter")
        cond_in = c.mb.fresh("cond_in")
        v_in = Value(c.mb.fresh("carried"), x.dtype, x.shape)
        y, inner = build_sequence(body, v_in, self.body, "body")
        if y.name == v_in.name:
            y = Value(body.op("Identity", v_in.name), x.dtype, x.shape)
        cond_out = body.op("Identity", cond_in)
        graph = helper.make_graph(
            body.nodes,
            c.mb.fresh("loop_body"),
            [
                helper.make_tensor_value_info(i, INT64, []),
                helper.make_tensor_value_info(cond_in, BOOL, []),
                helper.make_tensor_value_info(v_in.name, x.dtype, list(x.shape)),
            ],
            [helper.make_tensor_value_info(cond_out, BOOL, []), helper.make_tensor_value_info(y.name, y.dtype, list(y.shape))],
            body.initializers,
        )
        trips = c.const(np.array(2, np.int64), hint="trips")
        out = c.op("Loop", trips, "", x.name, body=graph)
        # ONNX shape inference gives a Loop's outputs a type but no shape.
        return Built(Value(out, x.dtype, x.shape, NONE), "", 0, [], inner)


@dataclass(frozen=True)
class Func:
    """The pieces as a model-local function, called ``calls`` times in a row."""

    body: tuple = ()
    calls: int = 1

    leak = None
    rule = ""

    def build(self, c: Container, x: Value, where: str) -> Built:
        from .spec import build_sequence

        body = Container(c.mb, "function")
        v_in = Value(c.mb.fresh("fn_in"), x.dtype, x.shape, NONE)  # nothing is typed in a function
        y, inner = build_sequence(body, v_in, self.body, "function")
        if y.name == v_in.name:
            y = Value(body.op("Identity", v_in.name), x.dtype, x.shape)
        name = c.mb.fresh("Fn")
        fn = helper.make_function(FUNCTION_DOMAIN, name, [v_in.name], [y.name], body.nodes, [helper.make_opsetid("", c.opset)])
        c.mb.functions.append(fn)
        cur = x.name
        for _ in range(self.calls):
            cur = c.op(name, cur, domain=FUNCTION_DOMAIN)
        # ONNX infers a call's output through the body from the caller's input shape.
        return Built(Value(cur, x.dtype, x.shape, known_after(self.body, x.known, x.rank, c.opset)), "", 0, [], inner)


def _fc_known(fc: FC, known: str, rank: int, opset: int) -> str:
    if fc.trap == "left_const":  # W [M, M] @ x: ONNX knows [M, H] from W once it knows x's rank
        return FULL if known == LEAD else known
    if fc.form != "gemm":
        return known
    # On rank > 2 the Gemm reads Reshape(x, [-1, K]) and is put back to a constant shape; a
    # rank-2 Gemm's output is [M, N], M unknown if x's shape is (Gemm-11's inference gives
    # nothing without x's shape, Gemm-13's gives that).
    if rank > 2 or known == FULL:
        return FULL
    return LEAD if opset >= 13 else NONE


def known_after(steps: tuple, known: str, rank: int, opset: int) -> str:
    """What ONNX shape inference knows after ``steps`` (glue, piece) given what it knew of the
    input (a function body at a call site, inferred from the caller's input)."""
    prev = None
    for glue, piece in steps:
        if glue == "residual" and prev is not None:
            known = merge_known(known, prev)
        prev = known
        if isinstance(piece, Loop):
            known = NONE
        elif isinstance(piece, If):
            known = FULL
        elif isinstance(piece, FC):
            known = _fc_known(piece, known, rank, opset)
        elif isinstance(piece, Func):
            known = known_after(piece.body, known, rank, opset)
    return known
