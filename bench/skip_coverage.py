"""The skip-norm section of the coverage benchmark (bench/bench_coverage.py).

Ground truth: the manifests' ``residual_norm_sites``, counted from the source model (norm
modules fed by a residual sum of two equal-shape activations; tests/fixtures/make_fixtures.py
``residual_norm_sites()``, and the Keras encoder's builder).  Each tool's fused skip nodes are
checked against the ORIGINAL graph with the fixtures' own graph walk (tests/fixtures/graph_walk.py,
not our matcher): the node's first output must be the output of a norm (a decomposed chain or
a native LayerNormalization / RMSNormalization node) whose input is an Add of two activations,
and its two summed inputs must be that Add's operands (a dense layer's bias Add in front of
an operand may be folded in).  A fused node that fails this is a false positive; matches
beyond the ground truth are false positives too.

The fixtures' walk sees the torch exporters' chains and native norm nodes; TensorFlow's
x·s + (β − mean·s) / Keras 3's x·s + ((−mean)·s + β), with a GlobalAveragePool or ReduceMean
mean, is found by ``tf_layernorms`` below (else a skip fusion on the tf2onnx encoder would
count as a false positive).
"""

from __future__ import annotations

import logging
from pathlib import Path

import onnx

from tests.fixtures.graph_walk import GraphView, find_norm_chains

OURS_SKIP_OPS = {"FusedSkipLayerNorm", "FusedSkipRMSNorm"}
ORT_SKIP_OPS = {"SkipLayerNormalization", "SkipSimplifiedLayerNormalization"}
_RESHAPES = {"Reshape", "Identity", "Cast", "Squeeze", "Unsqueeze"}
_ORT_CAST_PREFIX = "InsertedPrecisionFreeCast_"
_NATIVE_NORMS = {"LayerNormalization", "RMSNormalization", "SimplifiedLayerNormalization"}

#: onnxruntime.transformers optimizer model_type per fixture family; others get "bert",
#: whose pipeline runs both the LayerNorm and the simplified (RMS) skip fusions.
ORT_MODEL_TYPES = {"bert": "bert", "gpt2": "gpt2", "vit": "vit", "t5": "t5", "keras_bert": "bert_tf"}


class Sites:
    """Residual + norm sites of an original graph: norm output -> the two summed operands."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.gv = gv = GraphView(model)
        norms: dict[str, str] = {}  # norm output -> norm input
        for chain in find_norm_chains(gv):
            members = {id(n) for n in chain.nodes}
            produced = {o for n in chain.nodes for o in n.output}
            inputs = {gv.root(i) for n in chain.nodes for i in n.input if i and i not in produced and not gv.is_const(i)}
            out = next(o for n in reversed(chain.nodes) for o in n.output
                       if not all(id(c) in members for c in gv.consumers.get(o, [])) or not gv.consumers.get(o))
            if len(inputs) == 1:
                norms[out] = inputs.pop()
        for n in gv.nodes:
            if n.op_type in _NATIVE_NORMS:
                norms[n.output[0]] = gv.root(n.input[0])
        norms.update(tf_layernorms(gv))
        self.sites: dict[str, tuple[str, str]] = {}
        for out, x in norms.items():
            add = gv.producer.get(x)
            if add is not None and add.op_type == "Add" and not any(gv.is_const(i) for i in add.input):
                self.sites[out] = (add.input[0], add.input[1])

    def matches(self, node: onnx.NodeProto, fused: onnx.ModelProto) -> bool:
        """``node`` (of ``fused``) fuses one residual + norm site of the original graph: its
        two summed inputs are the operands of the site's Add and its first output is the
        site's norm output.  Casts the tool put around the node are looked through; a name
        the original graph does not have (the tool's other fusions rewrote that producer or
        consumer) is taken as agreeing, but one of the two inputs must be the original's."""
        producer = {o: n for n in fused.graph.node for o in n.output}
        a, b = (self._original(i, producer) for i in node.input[:2])
        out = node.output[0]
        cons = [c for c in fused.graph.node if out in c.input]
        if out not in self.sites and len(cons) == 1 and cons[0].op_type == "Cast":
            out = cons[0].output[0]
        out = self._original(out, {}) or out
        if a is None and b is None:
            return False
        for norm_out, (p, q) in self.sites.items():
            if (self._operand(a, p) and self._operand(b, q)) or (self._operand(a, q) and self._operand(b, p)):
                if not self._known(out) or out in self._reshaped(norm_out):
                    return True
        return False

    def _reshaped(self, name: str) -> set[str]:
        """``name`` and what only reshapes or casts it (a tool may drop a Reshape after the norm)."""
        names = {name}
        cons = self.gv.consumers.get(name, [])
        while len(cons) == 1 and cons[0].op_type in _RESHAPES:
            name = cons[0].output[0]
            names.add(name)
            cons = self.gv.consumers.get(name, [])
        return names

    def _known(self, name: str) -> bool:
        return name in self.gv.producer or name in self.gv.consumers

    def _original(self, name: str, producer: dict[str, onnx.NodeProto]) -> str | None:
        """``name`` of the fused graph as the original's tensor (through the tool's Casts), or None."""
        while not self._known(name):
            if name.startswith(_ORT_CAST_PREFIX):  # an fp16 island onnxruntime's CPU session recast
                name = name[len(_ORT_CAST_PREFIX):]
            elif name in producer and producer[name].op_type == "Cast":
                name = producer[name].input[0]
            else:
                break
        return self.gv.root(name) if self._known(name) else None

    def _operand(self, name: str | None, operand: str) -> bool:
        if name is None or name == self.gv.root(operand):
            return True
        bias_add = self.gv.src(operand)  # Add(x, bias) folded into the fused node
        return (bias_add is not None and bias_add.op_type == "Add"
                and any(self.gv.is_const(i) for i in bias_add.input) and name in {self.gv.root(i) for i in bias_add.input})


_MEANS = {"GlobalAveragePool", "ReduceMean"}


def tf_layernorms(gv: GraphView) -> dict[str, str]:
    """TensorFlow's LayerNorm, norm output -> input x: Add(x·s, offset) where the offset holds
    mean·s (or Neg(mean)·s), mean a reduction of x, and s comes, through Mul(γ) / Reciprocal /
    Sqrt / Add(eps), from a reduction of (x − mean)²."""
    out: dict[str, str] = {}
    for n in gv.nodes:
        if n.op_type != "Add" or len(n.input) != 2:
            continue
        for xs_name, off in ((n.input[0], n.input[1]), (n.input[1], n.input[0])):
            xs = gv.src(xs_name)
            if xs is None or xs.op_type != "Mul":
                continue
            for x, s in ((xs.input[0], xs.input[1]), (xs.input[1], xs.input[0])):
                if gv.is_const(x) or gv.is_const(s):
                    continue
                means = {c.output[0] for c in gv.consumers.get(gv.root(x), []) if c.op_type in _MEANS}
                if means and _reads_mean_times(gv, off, means, s) and _from_variance(gv, s, gv.root(x), means):
                    out[n.output[0]] = gv.root(x)
    return out


def _reads_mean_times(gv: GraphView, name: str, means: set[str], s: str, depth: int = 3) -> bool:
    """``name`` is, or is computed (a few ops up) from, Mul(mean or Neg(mean), s)."""
    p = gv.src(name)
    if p is None or depth == 0:
        return False
    if p.op_type == "Mul" and s in p.input:
        other = gv.src(next(i for i in p.input if i != s) if p.input[0] != p.input[1] else s)
        m = other.input[0] if other is not None and other.op_type == "Neg" else None
        return any(gv.root(i) in means for i in p.input) or (m is not None and gv.root(m) in means)
    return any(_reads_mean_times(gv, i, means, s, depth - 1) for i in p.input if i)


def _from_variance(gv: GraphView, s: str, x: str, means: set[str], depth: int = 6) -> bool:
    p = gv.src(s)
    for _ in range(depth):
        if p is None:
            return False
        if p.op_type in _MEANS:
            sq = gv.src(p.input[0])
            if sq is None or sq.op_type not in ("Mul", "Pow"):
                return False
            d = gv.src(sq.input[0])
            return d is not None and d.op_type == "Sub" and gv.root(d.input[0]) == x and gv.root(d.input[1]) in means
        nonconst = [i for i in p.input if i and not gv.is_const(i)]
        if p.op_type not in ("Mul", "Reciprocal", "Sqrt", "Add", "Div", "Pow") or len(nonconst) != 1:
            return False
        p = gv.src(nonconst[0])
    return False


def ours_skip(path: Path) -> tuple[list[onnx.NodeProto], onnx.ModelProto, bool | None]:
    """Our fused skip nodes, the fused model, and whether it verifies on onnxruntime (verify
    leaves out the zero-size points of models with an op that kills onnxruntime there)."""
    import fusion

    result = fusion.run(str(path), ["skipnorm", "layernorm", "rmsnorm"], target="plugin")
    nodes = [n for n in result.model.graph.node if n.op_type in OURS_SKIP_OPS]
    verified = fusion.verify(str(path), result.model).passed if nodes else None
    return nodes, result.model, verified


def onnxruntime_skip(path: Path, family: str) -> list[tuple[int | None, list[onnx.NodeProto], onnx.ModelProto]]:
    """onnxruntime.transformers' optimizer with the family's model_type on the CPU provider,
    at the type's default opt_level (None) and at 0 (its Python fusions alone): on fp16 models
    the CPU session of opt_level >= 1 wraps the graph in Casts to fp32, after which its skip
    fusions find little.  ``skip_row`` keeps the better of the two."""
    from onnxruntime.transformers.optimizer import optimize_model

    model_type = ORT_MODEL_TYPES.get(family, "bert")
    runs = []
    for level in (None, 0):
        optimized = optimize_model(str(path), model_type=model_type, opt_level=level, use_gpu=False).model
        runs.append((level, [n for n in optimized.graph.node if n.op_type in ORT_SKIP_OPS], optimized))
    return runs


def skip_row(rec: dict, path: Path) -> dict:
    """The skip-norm fields of one benchmark row."""
    expected = rec.get("residual_norm_sites")
    row: dict = {"skip_expected": expected}
    if expected is None:
        logging.warning("%s: no residual_norm_sites in its manifest record: left out of the skip counts", rec["file"])
        return row
    sites = Sites(onnx.load(str(path)))
    row["skip_onnx_sites"] = len(sites.sites)  # Add -> norm in the graph, broadcasting ones included
    try:
        nodes, model, verified = ours_skip(path)
        _score(row, "ours", [sites.matches(n, model) for n in nodes], expected)
        if verified is not None:
            row["skip_ours_verified"] = verified
    except Exception as e:  # noqa: BLE001 - a tool that crashes found nothing
        row["skip_ours_error"] = f"{type(e).__name__}: {e}"[:200]
        _score(row, "ours", [], expected)
    try:
        runs = [(level, [sites.matches(n, m) for n in nodes]) for level, nodes, m in onnxruntime_skip(path, rec["family"])]
        level, hits = max(runs, key=lambda r: (min(sum(r[1]), expected), -len(r[1])))  # first of equals: the default
        _score(row, "onnxruntime", hits, expected)
        row["skip_onnxruntime_opt_level"] = "default" if level is None else level
    except Exception as e:  # noqa: BLE001
        row["skip_onnxruntime_error"] = f"{type(e).__name__}: {e}"[:200]
        _score(row, "onnxruntime", [], expected)
    return row


def _score(row: dict, tool: str, hits: list[bool], expected: int) -> None:
    """Sites found (at most the ground truth) and false positives (the other fused nodes)."""
    found = min(sum(hits), expected)
    row[f"skip_{tool}"] = found
    row[f"skip_{tool}_false_positives"] = len(hits) - found
