"""Hypothesis strategies for :class:`~tests.fuzz.spec.ModelSpec`.

Pieces are drawn one after another against the shape the model has reached, so every drawn
combination is a valid model.  Choices are listed simplest first: hypothesis shrinks toward
the first option, so a failure shrinks to the plainest model that still fails.
"""

from __future__ import annotations

from hypothesis import strategies as st

from .algebra import algebra_norms
from .builder import DOUBLE, FLOAT, FLOAT16
from .pieces import ACTIVATIONS, FC, Attention, Func, If, Leak, Loop, Norm, TFNorm
from .spec import GLUES, ModelSpec

OPSETS = (13, 11, 17, 18, 20)
EPS = (1e-5, 1e-3, 1e-6)


def _static(d) -> bool:
    return isinstance(d, int)


@st.composite
def shapes(draw, dtype: int) -> tuple:
    # fp16 norms over few elements are ill-conditioned (the variance of 4 values can be tiny).
    width = draw(st.sampled_from((8, 16) if dtype == FLOAT16 else (8, 16, 4)))
    rank = draw(st.sampled_from((3, 2, 4)))
    lead = draw(st.sampled_from(("B", 2)))
    middle = draw(st.sampled_from((3, "S", width)))  # == width: some broadcast traps need it
    if rank == 2:
        return (middle if middle != "S" else lead, width)
    if rank == 3:
        return (lead, middle, width)
    return (lead, draw(st.sampled_from((4, width))), middle, width)


def _leak(draw, where: str) -> Leak | None:
    if where != "main" or draw(st.integers(0, 3)) != 3:
        return None
    return Leak(draw(st.sampled_from(("spy", "output", "body"))), draw(st.integers(0, 40)))


@st.composite
def norms(draw, shape: tuple, dtype: int, opset: int, where: str) -> Norm:
    rank = len(shape)
    kind = draw(st.sampled_from(("layer", "rms")))
    square = draw(st.sampled_from(("pow", "mul")))
    axes_options = ["last"]
    if _static(shape[-2]):
        axes_options.append("last2")
    if rank == 4 and _static(shape[1]):
        axes_options.append("channel")
    axes = draw(st.sampled_from(axes_options))
    gammas = ["const", "none"]
    if where != "function":
        gammas.append("input")
        if axes == "last" and _static(shape[-2]) and shape[-2] != 1:
            gammas.append("other_axis")
        if where == "main" and rank < 4:
            gammas.append("grow")
    restores = ["keep", "unsqueeze"]
    if axes != "channel":
        restores.append("reshape")
    if axes == "last" and _static(shape[-2]) and shape[-2] == shape[-1]:
        restores.append("wrong")
        if rank == 2:
            restores.append("none")
    traps = ["none", "none", "none", "var_axis" if kind == "layer" else "none", "center_axis"]
    if square == "pow":
        traps.append("pow3")
    if dtype == FLOAT16:
        # These divide by what can be ~0 (a mean of cubes, the spread over 2-3 rows, no eps):
        # a one-ulp fp16 difference upstream (fused ops round once, in fp32) then turns into
        # any difference at all.  They are dtype-blind traps: fp32 models cover them.
        traps = ["none"]
    trap = draw(st.sampled_from(traps)) if axes == "last" else "none"
    restore = draw(st.sampled_from(restores)) if trap in ("none", "pow3") else "keep"
    islands = (0, FLOAT, DOUBLE) if dtype == FLOAT16 else (0, DOUBLE)
    eps_kinds = ["init", "node"] + (["none"] if dtype != FLOAT16 else []) + (["input"] if where != "function" else [])
    if trap in ("var_axis", "center_axis"):
        # Over axis -2 rows can be constant (after a saturated softmax): 0/0 without eps.
        eps_kinds = [k for k in eps_kinds if k != "none"]
    return Norm(
        kind=kind,
        square=square,
        normalize=draw(st.sampled_from(("div", "reciprocal", "div_one", "pow_half"))),
        gamma=draw(st.sampled_from(gammas)),
        gshape=draw(st.sampled_from(("full", "last", "padded"))),
        beta=draw(st.sampled_from(("const", "none", "input") if where != "function" else ("const", "none"))),
        eps=draw(st.sampled_from(eps_kinds)),
        eps_value=draw(st.sampled_from(EPS)),
        axes=axes,
        positive=draw(st.booleans()),
        swap=draw(st.booleans()),
        island=(island := draw(st.sampled_from(islands))),
        island_end=draw(st.sampled_from(("before", "after", "between"))) if island else "before",
        var_mean=kind == "layer" and draw(st.booleans()),
        restore=restore,
        trap=trap,
        leak=_leak(draw, where),
    )


@st.composite
def tf_norms(draw, shape: tuple, dtype: int, opset: int, where: str) -> TFNorm:
    square = draw(st.sampled_from(("mul", "pow")))
    inputs_ok = where != "function"
    return TFNorm(
        square=square,
        inverse=draw(st.sampled_from(("reciprocal", "pow_half"))),
        gamma=draw(st.sampled_from(("const", "none", "input") if inputs_ok else ("const", "none"))),
        shift=draw(st.sampled_from(("beta", "neg", "sub", "beta_input") if inputs_ok else ("beta", "neg", "sub"))),
        eps=draw(st.sampled_from(("init", "node", "input") if inputs_ok else ("init", "node"))),
        eps_value=draw(st.sampled_from(EPS)),
        positive=draw(st.booleans()),
        swap=draw(st.booleans()),
        trap=draw(st.sampled_from(("none", "pow3"))) if square == "pow" and dtype != FLOAT16 else "none",
        leak=_leak(draw, where),
    )


@st.composite
def fcs(draw, shape: tuple, dtype: int, opset: int, where: str) -> FC:
    rank = len(shape)
    forms = ["matmul_add", "matmul"]
    # Gemm on rank > 2 goes through Reshape [-1, K] and back to a constant shape: with a
    # dynamic dim there it would be computed (Shape/Slice/Concat), which ONNX shape
    # inference cannot follow: the dims after it would be unknown.
    if rank == 2 or all(_static(d) for d in shape[1:]):
        forms.append("gemm")
    form = draw(st.sampled_from(forms))
    if form == "gemm":
        biases = ["n", "none", "scalar", "1n"] + (["rows"] if rank == 2 and _static(shape[0]) else [])
    elif form == "matmul_add":
        biases = ["n", "scalar", "1n", "11n"] + (["rows"] if _static(shape[-2]) else [])
    else:
        biases = ["none"]
    acts = [a for a in ACTIVATIONS if opset >= 20 or not a.startswith("gelu_op")]
    traps = ["none", "none", "none"]
    if form != "gemm":
        if where != "function":
            traps.append("weight_input")
        if _static(shape[-2]):
            traps.append("left_const")
    widths = (0, 8, 16) if where == "main" else (0,)
    return FC(
        form=form,
        n=draw(st.sampled_from(widths)),
        trans_a=form == "gemm" and draw(st.booleans()),
        trans_b=form == "gemm" and draw(st.booleans()),
        alpha=draw(st.sampled_from((1.0, 0.5))) if form == "gemm" else 1.0,
        beta=draw(st.sampled_from((1.0, 0.5, 0.0))) if form == "gemm" else 1.0,
        bias=draw(st.sampled_from(biases)),
        bias_first=draw(st.booleans()),
        w_transpose=draw(st.booleans()),
        w_node=draw(st.booleans()),
        act=draw(st.sampled_from(acts)),
        trap=draw(st.sampled_from(traps)),
        leak=_leak(draw, where),
    )


def next_shape(piece, shape: tuple) -> tuple:
    if isinstance(piece, Norm) and piece.gamma == "grow":
        return (1,) + shape
    if isinstance(piece, FC) and piece.trap != "left_const":
        return shape[:-1] + (piece.n or shape[-1],)
    return shape


@st.composite
def pieces(draw, shape: tuple, dtype: int, opset: int, where: str, depth: int = 0):
    kinds = ["norm", "fc", "norm", "fc", "tf", "attention", "algebra"]
    if where == "main" or (where == "body" and depth < 2):  # bodies nest (an If in a Loop body)
        kinds += ["if", "loop", "function"]
    kind = draw(st.sampled_from(kinds))
    if kind == "norm":
        return draw(norms(shape, dtype, opset, where))
    if kind == "fc":
        return draw(fcs(shape, dtype, opset, where))
    if kind == "tf":
        return draw(tf_norms(shape, dtype, opset, where))
    if kind == "algebra":  # the arithmetic other exporters write (tests/fuzz/algebra.py)
        return draw(algebra_norms(shape, dtype, opset, where, _leak(draw, where)))
    if kind == "attention":
        # (Without softmax, x xᵀ x shrinks magnitudes: a few in a row and rows underflow to
        # constants, where a norm after them computes 0/0.)
        return Attention()
    inner = "function" if kind == "function" else "body"

    def seq(min_size: int):
        return draw(sequences(shape, dtype, opset, inner, min_size, 2, depth + 1))

    if kind == "if":
        return If(then=seq(1), other=seq(0), outer_consts=draw(st.booleans()))
    if kind == "loop":
        return Loop(body=seq(1), outer_consts=draw(st.booleans()))
    return Func(body=seq(1), calls=draw(st.sampled_from((1, 2))))


@st.composite
def sequences(draw, shape: tuple, dtype: int, opset: int, where: str, min_size: int, max_size: int, depth: int = 0) -> tuple:
    n = draw(st.integers(min_size, max_size))
    steps = []
    for _ in range(n):
        glue = draw(st.sampled_from(GLUES))
        piece = draw(pieces(shape, dtype, opset, where, depth))
        steps.append((glue, piece))
        shape = next_shape(piece, shape)
    return tuple(steps)


@st.composite
def model_specs(draw, max_steps: int = 4) -> ModelSpec:
    opset = draw(st.sampled_from(OPSETS))
    dtype = draw(st.sampled_from((FLOAT, FLOAT16)))
    shape = draw(shapes(dtype))
    return ModelSpec(
        opset=opset,
        dtype=dtype,
        shape=shape,
        seed=draw(st.integers(0, 2**16)),
        dedupe=draw(st.booleans()),
        steps=draw(sequences(shape, dtype, opset, "main", 1, max_steps)),
    )
