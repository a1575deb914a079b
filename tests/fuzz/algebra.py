"""A norm piece in the arithmetic other exporters write (patterns/_algebra.py): means as
ReduceSum ÷ N / × 1/N / ÷ a count of Shape dims / GlobalAveragePool, one-pass variance
E[x²] − E[x]² (clamped by Max or Relu, or bare), Pow(v, 0.5) roots, x + Neg(mean), γ folded
into the inverse, keepdims=0 statistics put back by Unsqueeze; and traps that look like them.

Normalizes the last axis only.  Counts follow the rules' checks: a constant N needs the last
dim static (always so here) and the shape known; GlobalAveragePool needs rank 3 and the rank
known; a restore needs the whole shape known.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from .builder import FLOAT, FULL, NONE, NP, Container, Value
from .pieces import CONST, CORE, POST, Built, Leak, Role, _arith, _reduced, same_type_alts


@dataclass(frozen=True)
class AlgebraNorm:
    kind: str = "layer"  # layer | rms
    mean: str = "sum_div"  # reduce_mean | sum_div | sum_mul | sum_count | gap
    variance: str = "one_pass"  # layer: two_pass | one_pass | one_pass_relu | one_pass_bare | jnp_var
    guard: bool = False  # jnp_var: behind Where(N − ddof > 0, ·, NaN), as jax2onnx writes jnp.var
    root: str = "pow_half"  # sqrt | pow_half
    inverse: str = "div"  # div | reciprocal | div_one | pow_neg
    center: str = "sub"  # layer: sub | add_neg
    restore: bool = False  # statistics with keepdims=0, put back by Unsqueeze
    gamma: str = "const"  # none | const
    folded: bool = False  # γ multiplies the inverse first: x·(rsqrt·γ) (not with inverse=div)
    beta: str = "const"  # none | const (layer only)
    eps_value: float = 1e-5
    swap: bool = False
    trap: str = "none"  # none | wrong_n | other_mean | pow_049 | times_n | ddof1 (jnp_var)
    # layer: TensorFlow's form x·s + offset, s = rsqrt(v + eps)(·γ); offset: "" (not this form) |
    # sub (β − mean·s) | neg_mean_beta ((−mean)·s + β, Keras 3) | neg_prod_beta (−(mean·s) + β) |
    # neg_mean ((−mean)·s) | neg_prod (−(mean·s))
    tf_offset: str = ""
    leak: Leak | None = None

    @property
    def rule(self) -> str:
        return "layernorm" if self.kind == "layer" else "rmsnorm"

    def _fusable(self, x: Value) -> bool:
        if self.trap != "none":
            return False
        if x.known != FULL and self.restore:
            return False  # the restore check compares the dims
        if self.mean == "gap" and (x.rank != 3 or x.known == NONE):
            return False
        if (self.mean in ("sum_div", "sum_mul") or (self.kind == "layer" and self.variance == "jnp_var")) and x.known == NONE:
            return False  # N checked against the (unknown) shape
        return True

    def count(self, x: Value, params: int = 2) -> int:
        if not self._fusable(x):
            return 0
        if self.tf_offset:  # one match or none: γ and β are inside it
            has_beta = self.tf_offset in ("sub", "neg_mean_beta", "neg_prod_beta")
            return 0 if x.known == NONE and self.gamma == "none" and not has_beta else 1
        if x.known != NONE:
            return 1
        # Rank unknown: the normalized size must come from the γ/β the match takes.
        taken = [p for p in (self.gamma, self.beta if self.kind == "layer" else "none")[:params] if p == "const"]
        return 1 if taken else 0

    def build(self, c: Container, x: Value, where: str) -> Built:
        rank, t, shape = x.rank, x.dtype, x.shape
        width = shape[-1]
        n = float(width - 1 if self.trap == "wrong_n" else width)
        keep = 0 if self.restore else 1
        red = _reduced(shape, [-1])
        flat = shape[:-1]
        roles: list[Role] = []
        rng = c.mb.rng

        def role(name: str, shp: tuple, kind: str = CORE) -> str:
            roles.append(Role(Value(name, t, shp), kind))
            return name

        def mean_of(v: str) -> str:
            if self.mean == "reduce_mean":
                return c.reduce_mean(v, [-1], keepdims=keep)
            if self.mean == "gap":  # (restore is never drawn with gap: it keeps its dims)
                return c.op("GlobalAveragePool", v)
            if c.opset >= 13:
                total = c.op("ReduceSum", v, c.ints([-1]), keepdims=keep)
            else:
                total = c.op("ReduceSum", v, axes=[-1], keepdims=keep)
            role(total, red if keep else flat)
            if self.mean == "sum_count" or self.trap == "times_n":
                count = c.op("Cast", c.op("Gather", c.op("Shape", v), c.ints([-1]), axis=0), to=t)
                return c.op("Mul" if self.trap == "times_n" else "Div", total, count)
            if self.mean == "sum_mul":
                return _arith(c, "Mul", total, c.scalar(1.0 / n, t), self.swap)
            return c.op("Div", total, c.scalar(n, t))

        def put_back(v: str) -> str:
            return c.unsqueeze(v, [rank - 1]) if self.restore else v

        if self.kind == "layer":
            m = role(mean_of(x.name), red if keep else flat)
            mb = role(put_back(m), red)
            if self.tf_offset and self.variance.startswith("one_pass"):
                d = None  # (the TF form centers nothing then: x·s and mean·s)
            elif self.center == "add_neg":
                d = role(_arith(c, "Add", x.name, role(c.op("Neg", mb), red), self.swap), shape)
            else:
                d = role(c.op("Sub", x.name, mb), shape)
            if self.variance == "two_pass":
                var = role(put_back(role(mean_of(role(c.op("Mul", d, d), shape)), red if keep else flat)), red)
            elif self.variance == "jnp_var":  # ReduceSumSquare(d) put back, ÷ (N − ddof) computed
                if c.opset >= 18:
                    ss = c.op("ReduceSumSquare", d, c.ints([-1]), keepdims=keep)
                else:
                    ss = c.op("ReduceSumSquare", d, axes=[-1], keepdims=keep)
                role(ss, red if keep else flat)
                ddof = c.op("Cast", c.const(np.array(1 if self.trap == "ddof1" else 0, np.int64)), to=t)
                n_t = c.op("Sub", c.scalar(float(width), t), ddof)
                var = role(c.op("Div", role(put_back(ss), red), n_t), red)
                if self.guard:
                    nan = c.op("Expand", c.scalar(np.nan, t), c.op("Shape", var))
                    var = role(c.op("Where", c.op("Greater", n_t, c.scalar(0.0, t)), var, nan), red)
            else:
                ex2 = role(mean_of(role(c.op("Mul", x.name, x.name), shape)), red if keep else flat)
                mm = m
                if self.trap == "other_mean":
                    mm = role(mean_of(role(c.op("Tanh", x.name), shape)), red if keep else flat)
                diff = role(c.op("Sub", ex2, role(c.op("Mul", mm, mm), red if keep else flat)), red if keep else flat)
                if self.variance == "one_pass":
                    diff = role(_arith(c, "Max", diff, c.scalar(0.0, t), self.swap), red if keep else flat)
                elif self.variance == "one_pass_relu":
                    diff = role(c.op("Relu", diff), red if keep else flat)
                var = role(put_back(diff), red)
        else:
            d = x.name
            var = role(put_back(role(mean_of(role(c.op("Mul", x.name, x.name), shape)), red if keep else flat)), red)
        e = role(c.scalar(self.eps_value, t), (), CONST)
        ve = role(_arith(c, "Add", var, e, self.swap), red)
        exponent = 0.49 if self.trap == "pow_049" else 0.5

        def root() -> str:
            if self.root == "pow_half" or self.trap == "pow_049":
                return role(c.op("Pow", ve, c.scalar(exponent, t)), red)
            return role(c.op("Sqrt", ve), red)

        gamma = None
        if self.gamma == "const":
            gamma = role(c.const((rng.standard_normal(width) * 0.5 + 1).astype(NP[t]), hint="gamma"), (width,), CONST)
        if self.tf_offset:
            return self._tf_form(c, x, mb, ve, root, exponent, gamma, roles, role, where)
        folded = self.folded and gamma is not None and self.inverse != "div"
        if self.inverse == "div":
            y = c.op("Div", d, root())
        else:
            inv = {
                "reciprocal": lambda: c.op("Reciprocal", root()),
                "div_one": lambda: c.op("Div", c.scalar(1.0, t), root()),
                "pow_neg": lambda: c.op("Pow", ve, c.scalar(-exponent, t)),
            }[self.inverse]()
            role(inv, red)
            if folded:
                y = _arith(c, "Mul", d, role(_arith(c, "Mul", inv, gamma, self.swap), (*red[:-1], width)), self.swap)
            else:
                y = _arith(c, "Mul", d, inv, self.swap)
        if not folded:
            roles.append(Role(Value(y, t, shape), POST, self.count(x, 0)))
            if gamma is not None:
                y = _arith(c, "Mul", y, gamma, self.swap)
        if self.kind == "layer" and self.beta == "const":
            roles.append(Role(Value(y, t, shape), POST, self.count(x, 1)))
            b = role(c.const((rng.standard_normal(width) * 0.2).astype(NP[t]), hint="beta"), (width,), CONST)
            y = _arith(c, "Add", y, b, self.swap)
        roles.append(Role(Value(y, t, shape), POST))
        return self._typed(Built(Value(y, t, shape, x.known), self.rule, self.count(x), roles), t, where)




    def _typed(self, built: Built, t: int, where: str) -> Built:
        """Below opset 15 one body serves one element type per op (spec.admitted): the op this
        norm emits and the types its node may take. It computes in the model's type and, like
        every norm pattern, may take in a float Cast of x before it (cast(x))."""
        built.op = "FusedLayerNorm" if self.kind == "layer" else "FusedRMSNorm"
        built.alts = same_type_alts(t, where)
        built.takes_cast = True
        return built

    def _tf_form(self, c: Container, x: Value, mean: str, ve: str, root, exponent: float, gamma, roles, role, where: str) -> Built:
        t, shape, width = x.dtype, x.shape, x.shape[-1]
        red = _reduced(shape, [-1])
        inv = {
            "div": lambda: c.op("Reciprocal", root()),  # (a division has no s to share)
            "reciprocal": lambda: c.op("Reciprocal", root()),
            "div_one": lambda: c.op("Div", c.scalar(1.0, t), root()),
            "pow_neg": lambda: c.op("Pow", ve, c.scalar(-exponent, t)),
        }[self.inverse]()
        s = role(inv, red)
        sshape = red
        if gamma is not None:
            s, sshape = role(_arith(c, "Mul", s, gamma, self.swap), shape), shape
        xs = role(_arith(c, "Mul", x.name, s, self.swap), shape)
        beta = None
        if self.tf_offset in ("neg_mean_beta", "neg_prod_beta", "sub"):
            beta = role(c.const((c.mb.rng.standard_normal(width) * 0.2).astype(NP[t]), hint="beta"), (width,), CONST)
        if self.tf_offset == "sub":  # β − mean·s
            off = role(c.op("Sub", beta, role(_arith(c, "Mul", mean, s, self.swap), sshape)), shape)
        else:
            if self.tf_offset in ("neg_mean_beta", "neg_mean"):  # (−mean)·s
                neg = role(_arith(c, "Mul", role(c.op("Neg", mean), red), s, self.swap), sshape)
            else:  # −(mean·s)
                neg = role(c.op("Neg", role(_arith(c, "Mul", mean, s, self.swap), sshape)), sshape)
            off = neg if beta is None else role(_arith(c, "Add", neg, beta, self.swap), shape)
        y = _arith(c, "Add", xs, off, self.swap)
        roles.append(Role(Value(y, t, shape), POST))
        return self._typed(Built(Value(y, t, shape, x.known), self.rule, self.count(x), roles), t, where)


@st.composite
def algebra_norms(draw, shape: tuple, dtype: int, opset: int, where: str, leak) -> AlgebraNorm:
    kind = draw(st.sampled_from(("layer", "rms")))
    means = ["sum_div", "sum_mul", "sum_count", "reduce_mean"] + (["gap"] if len(shape) == 3 and where == "main" else [])
    mean = draw(st.sampled_from(means))
    if kind == "rms":
        variances = ["two_pass"]
    elif dtype != FLOAT:  # (a one-pass variance cancels in half precision)
        variances = ["two_pass", "jnp_var"]
    else:
        variances = ["one_pass", "one_pass_relu", "one_pass_bare", "jnp_var", "two_pass"]
    traps = ["none", "none", "none", "pow_049"]
    if mean in ("sum_div", "sum_mul"):
        traps.append("wrong_n")
    if mean.startswith("sum"):
        traps.append("times_n")
    variance = draw(st.sampled_from(variances))
    if kind == "layer" and variance.startswith("one_pass"):
        traps.append("other_mean")
    if kind == "layer" and variance == "jnp_var":
        traps.append("ddof1")
    tf_offset = ""
    if kind == "layer" and draw(st.integers(0, 3)) == 0:
        tf_offset = draw(st.sampled_from(("neg_mean_beta", "neg_prod_beta", "sub", "neg_mean", "neg_prod")))
    return AlgebraNorm(
        tf_offset=tf_offset,
        kind=kind,
        mean=mean,
        variance=variance,
        guard=variance == "jnp_var" and draw(st.booleans()),
        root=draw(st.sampled_from(("pow_half", "sqrt"))),
        inverse=draw(st.sampled_from(("div", "reciprocal", "div_one", "pow_neg"))),
        center=draw(st.sampled_from(("sub", "add_neg"))),
        restore=mean != "gap" and draw(st.booleans()),
        gamma=draw(st.sampled_from(("const", "none"))),
        folded=draw(st.booleans()),
        beta=draw(st.sampled_from(("const", "none"))),
        eps_value=draw(st.sampled_from((1e-5, 1e-3, 1e-6))),
        swap=draw(st.booleans()),
        trap=draw(st.sampled_from(traps)),
        leak=leak,
    )
