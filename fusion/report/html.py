"""A self-contained HTML report of a fusion run: ``python -m fusion fuse ... --report r.html``.

Per fusion: the matched subgraph of the original model and the node(s) that replaced it, each
drawn as inline SVG (fusion.report.svg), and the emitted nodes' attributes; then the
near-misses with their reasons and the verification table (fusion.verify on the written
model, or why it could not run).  One file, no scripts, no external CSS/fonts/images.
"""

from __future__ import annotations

import contextlib
import html
import logging
import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from ..ir import model_io
from ..rewrite import specs
from ..errors import OutputError
from ..ir.graph import ModelGraph, node_lists
from ..passes.driver import Fusion, PassResult
from .svg import Box, elide, layered_svg

log = logging.getLogger(__name__)

# Attributes worth a place inside a node's box, with the default that need not be shown
# (None: always shown); the rest go to the tooltip and the table.
KEY_ATTRS: dict[str, dict[str, Any]] = {
    "ReduceMean": {"axes": None, "keepdims": 1},
    "Cast": {"to": None},
    "Transpose": {"perm": None},
    "Gemm": {"transA": 0, "transB": 0, "alpha": 1.0, "beta": 1.0},
    "Gelu": {"approximate": "none"},
    "FusedLayerNorm": {"epsilon": None, "axis": None},
    "FusedRMSNorm": {"epsilon": None, "axis": None},
    "FusedFC": {"out_features": None, "activation": "none", "transpose_weight": 0},
    "LayerNorm": {"epsilon": None},
    "LayerNormalization": {"epsilon": None, "axis": -1},
    "RMSNormalization": {"epsilon": None, "axis": -1},
    "CustomFCPluginDynamic": {"out_dims": None, "type_id": None},
}
MAX_DRAWN_NODES = 80  # a bigger match is listed, not drawn
OPEN_ALL_UP_TO = 12  # with more fusions, only the first of each rule starts expanded


def write_report(
    model_path: str | os.PathLike,
    fused_path: str | os.PathLike | None,
    result: PassResult,
    report_path: str | os.PathLike,
    *,
    verify: bool = True,
    shown_as: str | os.PathLike | None = None,
    check: Any = None,
    sections: Sequence[str] = (),
    fused_shown_as: str | os.PathLike | None = None,
) -> Path:
    """Write the HTML report of ``result`` (the fusion of ``model_path`` into ``fused_path``).

    ``fused_path`` None (a dry run) or ``verify=False``: the report says verification did not run.
    ``shown_as``: the original's name in the report when ``model_path`` is a copy of it (see
    :func:`snapshot`).  ``check``: a VerifyReport already made (e.g. on TensorRT), shown instead
    of verifying on onnxruntime; ``sections``: more HTML sections, after the verification's;
    ``fused_shown_as``: the fused model's name in the report (where it is written elsewhere first).
    """
    out = Path(report_path)
    if out.suffix.lower() not in (".html", ".htm"):
        log.warning("%s: the report is HTML whatever the file's suffix", out)
    check_report_path(out, [p for p in (model_path, fused_path, shown_as) if p is not None])
    text = render_report(model_path, fused_path, result, verify=verify, shown_as=shown_as, check=check, sections=sections,
                         fused_shown_as=fused_shown_as)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
    except OSError as e:
        raise OutputError(f"--report {out}: cannot write: {e.strerror or e}") from e
    log.info("wrote %s (%d fusions, %.0f kB)", out, len(result.fusions), len(text) / 1024)
    return out


# -- where the report goes ------------------------------------------------------------------


def check_report_path(report: str | os.PathLike, models: Sequence[str | os.PathLike]) -> None:
    """Raise OutputError unless ``report`` can be written and names none of ``models`` (nor
    their external data files): called before anything is written."""
    out = Path(report)
    for m in models:
        m = Path(m)
        for victim in (m, *model_io._data_names(m, 8)):  # (the data files save() writes)
            if _same_path(out, victim):
                what = "model" if victim == m else "model's external data"
                raise OutputError(f"--report {out} is the {what} file {victim}: give the HTML report its own path")
    if out.is_dir():
        raise OutputError(f"--report {out}: is a directory")
    if out.exists():
        if not os.access(out, os.W_OK):
            raise OutputError(f"--report {out}: not writable")
        return
    parent = out.parent
    while not parent.exists() and parent != parent.parent:  # the report's parents get made
        parent = parent.parent
    if not parent.is_dir():
        raise OutputError(f"--report {out}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"--report {out}: directory {parent} is not writable")


def _same_path(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    return os.path.normcase(os.path.realpath(a)) == os.path.normcase(os.path.realpath(b))


@contextlib.contextmanager
def snapshot(model_path: str | os.PathLike) -> Iterator[Path]:
    """A copy of the model at ``model_path`` and its external data that outlives writing over
    it (``fuse M -o M --report R`` reports on the original): hard links beside it where the
    file system allows, else copies; removed on exit."""
    src = Path(model_path)
    loaded = model_io.load(src)  # (graph only: external data stays on disk)
    files = [src.name] + sorted(
        {e.value for t in model_io.external_tensors(loaded.proto) for e in t.external_data if e.key == "location"}
    )
    try:
        tmp = Path(tempfile.mkdtemp(prefix=".fusion-report-", dir=src.parent))
    except OSError:
        tmp = Path(tempfile.mkdtemp(prefix="fusion-report-"))
    try:
        for rel in files:
            dst = tmp / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(src.parent / rel, dst)
            except OSError:
                shutil.copyfile(src.parent / rel, dst)
        yield tmp / src.name
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def render_report(
    model_path: str | os.PathLike,
    fused_path: str | os.PathLike | None,
    result: PassResult,
    *,
    verify: bool = True,
    shown_as: str | os.PathLike | None = None,
    check: Any = None,
    sections: Sequence[str] = (),
    fused_shown_as: str | os.PathLike | None = None,
) -> str:
    """The report as one HTML string (``shown_as``, ``check``, ``sections``: see :func:`write_report`)."""
    original = onnx.load(os.fspath(model_path), load_external_data=False)
    fused = onnx.load(os.fspath(fused_path), load_external_data=False) if fused_path and result.modified else None
    index = _ModelIndex(original, fused)
    check, why_not = (check, "") if check is not None else _verify(model_path, fused_path, result, verify)
    if shown_as is not None:
        model_path = shown_as
    if fused_shown_as is not None:
        fused_path = fused_shown_as

    body = [_summary(model_path, fused_path, result, original, fused, check, why_not)]
    body.append(_verify_section(check, why_not))
    body.extend(sections)
    body.append(_fusion_sections(result, index))
    body.append(_near_miss_section(result))
    if result.warnings:
        body.append("<section><h2>Warnings</h2><ul>" + "".join(f"<li>{_e(w)}</li>" for w in result.warnings) + "</ul></section>")
    title = f"Fusion report: {Path(model_path).name}"
    return _PAGE.format(title=_e(title), css=_CSS, body="\n".join(body))


# -- model lookups ------------------------------------------------------------------------


class _ModelIndex:
    """Node and constant lookups in the original (and fused) model, by scope path."""

    def __init__(self, original: onnx.ModelProto, fused: onnx.ModelProto | None):
        ours = {(s.domain, s.op_type) for s in specs.SPECS}
        graph = ModelGraph.from_proto(original, skip_functions=ours)
        self.scopes = {s.path: s.proto for s in graph.scopes}
        self._by_name: dict[str, dict[str, onnx.NodeProto]] = {}
        self.constants: dict[str, onnx.TensorProto] = {}
        self.known: set[str] = set()  # every value name of the original
        for model in (original, fused):
            if model is not None:
                self._collect(model, record=model is original)

    def _collect(self, model: onnx.ModelProto, record: bool) -> None:
        for container in node_lists(model).values():
            inits = getattr(container, "initializer", ())
            for t in inits:
                self.constants.setdefault(t.name, t)
            for n in container.node:
                if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
                    for a in n.attribute:
                        if a.name == "value" and n.output:
                            self.constants.setdefault(n.output[0], a.t)
            if record:
                self.known.update(t.name for t in inits)
                for n in container.node:
                    self.known.update(n.input)
                    self.known.update(n.output)
                for v in list(getattr(container, "input", ())) + list(getattr(container, "output", ())):
                    self.known.add(v if isinstance(v, str) else v.name)

    def matched(self, f: Fusion) -> tuple[list[onnx.NodeProto], str]:
        """The original nodes a fusion removed, and a note when some could not be found."""
        container = self.scopes.get(f.scope)
        if container is None:
            return [], f"scope {f.scope!r} not found in the original model"
        by_name = self._by_name.get(f.scope)
        if by_name is None:
            by_name = self._by_name[f.scope] = {}
            for n in container.node:
                if n.name:
                    by_name.setdefault(n.name, n)
        found = [by_name[name] for name in f.removed if name in by_name]
        if len(found) == len(f.removed):
            return found, ""
        # Unnamed nodes: walk back from what the fusion outputs to what it reads.
        walked = self._walk_back(container, f)
        if walked:
            return walked, "(nodes without names: the subgraph was found by walking back from the fused output)"
        return found, f"{len(f.removed) - len(found)} removed node(s) have no name and are not drawn"

    def _walk_back(self, container: Any, f: Fusion) -> list[onnx.NodeProto]:
        producer = {o: n for n in container.node for o in n.output if o}
        emitted = [n for n in f.nodes if n["op_type"] != "Constant"]
        boundary = {i for n in emitted for i in n["inputs"]}
        stack = [o for n in emitted for o in n["outputs"] if o in producer]
        seen: dict[int, onnx.NodeProto] = {}
        while stack and len(seen) < 4 * max(len(f.removed), 1):
            t = stack.pop()
            n = producer.get(t)
            if n is None or t in boundary or id(n) in seen:
                continue
            seen[id(n)] = n
            stack.extend(i for i in n.input if i)
        order = {id(n): i for i, n in enumerate(container.node)}
        return sorted(seen.values(), key=lambda n: order[id(n)])

    def is_constant(self, name: str) -> bool:
        # An input the original never had is a constant the rewrite added.
        return name in self.constants or (bool(name) and name not in self.known)

    def describe(self, name: str, dtype: bool = True) -> str:
        t = self.constants.get(name)
        if t is None:
            return "new constant"
        return _tensor_text(t, dtype)


def _tensor_text(t: onnx.TensorProto, dtype: bool = True) -> str:
    """A scalar's value, a short vector's values, else shape (and type)."""
    dims = list(t.dims)
    size = int(np.prod(dims)) if dims else 1
    external = t.data_location == onnx.TensorProto.EXTERNAL
    if size <= 4 and not external:
        try:
            v = numpy_helper.to_array(t).reshape(-1)
        except Exception:  # noqa: BLE001 - an odd encoding: fall back to the shape
            v = None
        if v is not None and v.dtype.kind in "fiub":
            vals = [_num(x) for x in v.tolist()]
            return vals[0] if not dims else "[" + ", ".join(vals) + "]"
    shape = "[" + "×".join(str(d) for d in dims) + "]"
    return shape + (" " + onnx.TensorProto.DataType.Name(t.data_type).lower() if dtype else "")


def _num(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


def _attr_value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, onnx.TensorProto):
        return _tensor_text(v)
    if isinstance(v, bytes):
        return v.decode(errors="replace")
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_attr_value(x) for x in v) + "]"
    return str(v)


def _proto_attrs(n: onnx.NodeProto) -> dict[str, Any]:
    out = {}
    for a in n.attribute:
        if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
            out[a.name] = "<graph>"
            continue
        v = onnx.helper.get_attribute_value(a)
        if a.name == "to" and n.op_type == "Cast":
            v = onnx.TensorProto.DataType.Name(v)
        out[a.name] = v
    return out


# -- drawing ------------------------------------------------------------------------------


def _short_name(name: str) -> str:
    """The informative tail of an exporter's value name: /a/b/LayerNorm/Add_1_output_0 -> LayerNorm/Add_1."""
    tail = name.replace("_output_0", "").strip("/")
    parts = tail.split("/")
    return "/".join(parts[-2:]) if len(parts) > 1 else tail


def _draw(nodes: Sequence[dict], index: _ModelIndex, kind: str, uid: str) -> str:
    """``nodes``: dicts with op_type, name, inputs, outputs, attributes."""
    produced = {o: i for i, n in enumerate(nodes) for o in n["outputs"] if o}
    read = {i for n in nodes for i in n["inputs"]}
    boxes: list[Box] = []
    edges: list[tuple[str, str]] = []
    inputs_seen: set[str] = set()
    for i, n in enumerate(nodes):
        consts, details = [], []
        for name in n["inputs"]:
            if not name:
                continue
            if name in produced:
                edges.append((f"n{produced[name]}", f"n{i}"))
            elif index.is_constant(name):
                consts.append(name)
                if kind != "fused":  # the emitted node's inputs are in its table
                    details.append(index.describe(name, dtype=False))
            else:
                if name not in inputs_seen:
                    inputs_seen.add(name)
                    boxes.append(Box(f"t:{name}", _short_name(name), kind="input", title=name))
                edges.append((f"t:{name}", f"n{i}"))
        for key, default in KEY_ATTRS.get(n["op_type"], {}).items():
            value = n["attributes"].get(key)
            if value is not None and (default is None or value != default):
                details.append(f"{key}={_attr_value(value)}")
        title = [f"{n['op_type']} {n['name']}".strip()]
        title += [f"{c} = {index.describe(c)}" for c in consts]
        title += [f"{k} = {_attr_value(v)}" for k, v in n["attributes"].items() if k not in ("plugin_version", "plugin_namespace")]
        boxes.append(Box(f"n{i}", n["op_type"], ", ".join(details), kind, "\n".join(title)))
        for o in n["outputs"]:
            if o and o not in read:
                boxes.append(Box(f"t:{o}", _short_name(o), kind="output", title=o))
                edges.append((f"n{i}", f"t:{o}"))
    return layered_svg(boxes, edges, uid=uid)


def _as_dict(n: onnx.NodeProto) -> dict:
    return {
        "op_type": n.op_type,
        "name": n.name,
        "domain": n.domain,
        "inputs": list(n.input),
        "outputs": list(n.output),
        "attributes": _proto_attrs(n),
    }


# -- sections -----------------------------------------------------------------------------


def _e(text: Any) -> str:
    return html.escape(str(text))


def _verify(model_path, fused_path, result: PassResult, enabled: bool):
    if not enabled:
        return None, "verification was not requested"
    if fused_path is None:
        return None, "dry run: no fused model was written, so there is nothing to run"
    if not result.modified:
        return None, "nothing was fused: the output is a copy of the input"
    try:
        from ..compare.verify import verify

        return verify(model_path, fused_path), ""
    except Exception as e:  # noqa: BLE001 - the report says why instead of failing
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        log.warning("verification did not run: %s", first)
        return None, f"verification could not run: {type(e).__name__}: {first}"


def _count_nodes(model: onnx.ModelProto | None) -> str:
    if model is None:
        return "–"
    return str(sum(len(c.node) for c in node_lists(model).values()))


def _summary(model_path, fused_path, result, original, fused, check, why_not) -> str:
    counts = result.counts()
    fused_text = ", ".join(f"{n} × {rule}" for rule, n in sorted(counts.items())) or "nothing"
    if check is not None:
        badge = f'<span class="badge {"ok" if check.passed else "fail"}">{"PASSED" if check.passed else "FAILED"}</span>'
        verdict = f'{badge} on {_e(check.backend)}, max abs error {check.max_abs:.3g} (<a href="#verify">table</a>)'
    else:
        verdict = f'<span class="badge skip">not run</span> {_e(why_not)}'
    rows = [
        ("model", _e(os.fspath(model_path))),
        ("fused model", _e(os.fspath(fused_path)) if fused_path else "– (dry run)"),
        ("fused", _e(fused_text) + f" in {result.seconds * 1000:.0f} ms"),
        ("near-misses", f'<a href="#near-misses">{len(result.near_misses)}</a>'),
        ("nodes", f"{_count_nodes(original)} → {_count_nodes(fused) if fused is not None else '–'}"),
        ("verification", verdict),
    ]
    table = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
    when = time.strftime("%Y-%m-%d %H:%M")
    return (
        f"<header><h1>Fusion report: {_e(Path(model_path).name)}</h1>"
        f'<p class="muted">onnx-trt-fusion · {when}</p></header>'
        f'<section class="summary"><table class="kv">{table}</table></section>'
    )


def _verify_section(check, why_not: str) -> str:
    head = '<section id="verify"><h2>Verification</h2>'
    if check is None:
        return head + f'<p class="muted">Not run: {_e(why_not)}.</p></section>'
    rows = []
    errors: dict[str, None] = {}
    for c in check.checks:
        cls = "ok" if c.passed else "fail"
        what = getattr(c, "check", "random")
        rows.append(
            f"<tr><td>{c.shape_point}</td><td>{_e(what.split(':')[0])}</td><td>{_e(c.output)}</td><td>{_e(c.dtype)}</td>"
            f"<td>{_e(c.shape)}</td><td>{c.max_abs:.3g}</td><td>{c.max_rel:.3g}</td><td>{c.atol:.1g}</td><td>{c.rtol:.1g}</td>"
            f'<td class="{cls}">{"ok" if c.passed else "FAIL"}</td></tr>'
        )
        if getattr(c, "error", ""):
            errors.setdefault(f"shape {c.shape_point}: the fused model fails: {c.error}")
    labels = getattr(check, "labels", [])

    def label(i: int) -> str:
        return f" ({labels[i]})" if i < len(labels) and labels[i] != "random" else ""

    shapes = "".join(
        f"<li>shape {i}{_e(label(i))}: " + _e(", ".join(f"{k}={v}" for k, v in s.items())) + "</li>"
        for i, s in enumerate(check.shapes)
    )
    skipped = "".join(f'<li class="fail">{_e(e)}</li>' for e in errors)
    skipped += "".join(f"<li>skipped: {_e(s)}</li>" for s in check.skipped)
    verdict = "PASSED" if check.passed else "FAILED"
    return (
        head
        + f"<p>The original runs on onnxruntime; the fused model on {_e(check.backend)}; random inputs at each shape point, "
        + "then the extra checks named in the <em>check</em> column. "
        + f'<span class="badge {"ok" if check.passed else "fail"}">{verdict}</span></p>'
        + '<table class="grid"><tr><th>shape</th><th>check</th><th>output</th><th>dtype</th><th>dims</th><th>max abs</th>'
        + "<th>max rel</th><th>atol</th><th>rtol</th><th>result</th></tr>"
        + "".join(rows)
        + f'</table><ul class="muted">{shapes}{skipped}</ul></section>'
        + (check.latency.html() if getattr(check, "latency", None) is not None else "")
    )


def _fusion_sections(result: PassResult, index: _ModelIndex) -> str:
    if not result.fusions:
        return '<section id="fusions"><h2>Fusions</h2><p class="muted">Nothing fused.</p></section>'
    toc = []
    sections = []
    shown: set[tuple] = set()
    for i, f in enumerate(result.fusions, 1):
        emitted = [n for n in f.nodes if n["op_type"] != "Constant"]
        before, note = index.matched(f)
        ops = ", ".join(n["op_type"] for n in emitted)
        toc.append(
            f'<tr><td><a href="#fusion-{i}">{i}</a></td><td>{_e(f.rule)}</td><td>{_e(f.root)}</td>'
            f"<td>{len(f.removed)}</td><td>{_e(ops)}</td></tr>"
        )
        # Many fusions: expand the first of each shape of match only; the rest are alike.
        shape = (f.rule, tuple(sorted(n.op_type for n in before)), ops)
        is_open = len(result.fusions) <= OPEN_ALL_UP_TO or shape not in shown
        shown.add(shape)
        sections.append(_fusion_section(i, f, emitted, before, note, index, is_open))
    return (
        f'<section id="fusions"><h2>Fusions ({len(result.fusions)})</h2>'
        '<table class="grid toc"><tr><th>#</th><th>rule</th><th>root node</th><th>nodes removed</th><th>emitted</th></tr>'
        + "".join(toc)
        + "</table></section>\n"
        + "\n".join(sections)
    )


def _fusion_section(
    i: int, f: Fusion, emitted: list[dict], before: list[onnx.NodeProto], note: str, index: _ModelIndex, is_open: bool
) -> str:
    if len(before) > MAX_DRAWN_NODES:
        before_svg = f'<p class="muted">{len(before)} nodes: too many to draw.</p>'
    elif before:
        before_svg = _draw([_as_dict(n) for n in before], index, "op", f"b{i}")
    else:
        before_svg = '<p class="muted">The matched nodes could not be found in the original model.</p>'
    after_svg = _draw(emitted, index, "fused", f"a{i}")
    scope = "" if f.scope == "main" else f' <span class="scope">[{_e(f.scope)}]</span>'
    ops = ", ".join(n["op_type"] for n in emitted)
    removed = ", ".join(op + (f" ×{c}" if c > 1 else "") for op, c in sorted(Counter(n.op_type for n in before).items()))
    summary = (
        f'<span class="rule">{_e(f.rule)}</span> <span class="root">{_e(f.root)}</span>{scope} '
        f'<span class="muted">{len(f.removed)} node(s) → {_e(ops)}</span>'
    )
    return (
        f'<section class="fusion" id="fusion-{i}"><details{" open" if is_open else ""}><summary>#{i} {summary}</summary>'
        f'<div class="pair"><figure><figcaption>Before: the matched subgraph'
        f'{" (" + _e(removed) + ")" if removed else ""}</figcaption>{before_svg}'
        f'{"<p class=muted>" + _e(note) + "</p>" if note else ""}</figure>'
        f'<figure><figcaption>After (target {_e(f.target)})</figcaption>{after_svg}</figure></div>'
        + "".join(f'<p class="note">Note: {_e(n)}</p>' for n in getattr(f, "notes", ()))
        + "".join(_node_table(n, index, {o for e in emitted for o in e["outputs"]}) for n in emitted)
        + "</details></section>"
    )


def _value_text(name: str, index: _ModelIndex, produced: set[str]) -> str:
    text = _e(elide(name, 90))
    if name not in produced and index.is_constant(name):
        text += f' <span class="muted">{_e(index.describe(name))}</span>'
    return text


def _node_table(n: dict, index: _ModelIndex, produced: set[str]) -> str:
    """The emitted node's name, type, inputs (constants described), outputs and attributes."""
    spec = specs.by_op_type(n["op_type"], n["domain"]) if n["domain"] else None
    rows = [
        ("node", _e(n["name"])),
        ("op_type", f'<b>{_e(n["op_type"])}</b>' + (f' <span class="muted">domain {_e(n["domain"])}</span>' if n["domain"] else "")),
        ("inputs", "<br>".join(_value_text(i, index, produced) for i in n["inputs"])),
        ("outputs", "<br>".join(_e(elide(o, 90)) for o in n["outputs"])),
    ]
    for k, v in n["attributes"].items():
        ftype = ""
        if spec is not None and k in ("plugin_version", "plugin_namespace"):
            ftype = ' <span class="muted">STRING, picks the creator (not a field)</span>'
        elif spec is not None:
            try:
                t = spec.field(k).type
                ftype = f' <span class="muted">{t.onnx_name} → {t.trt_name}</span>'
            except KeyError:
                pass
        rows.append((f"@{_e(k)}", _e(_attr_value(v)) + ftype))
    doc = f'<p class="muted">{_e(spec.doc)}</p>' if spec is not None else ""
    return '<table class="kv node">' + "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows) + "</table>" + doc


def _near_miss_section(result: PassResult) -> str:
    head = f'<section id="near-misses"><h2>Near-misses ({len(result.near_misses)})</h2>'
    if not result.near_misses:
        return head + '<p class="muted">None: every pattern that got far enough to be interesting fused.</p></section>'
    rows = "".join(
        f"<tr><td>{_e(m.rule)}</td><td>{_e(m.node)}</td><td>{_e(m.scope)}</td><td>{_e(m.reason)}</td></tr>"
        for m in result.near_misses
    )
    return (
        head
        + '<p class="muted">Subgraphs that started to match but did not fuse, and why.</p>'
        + f'<table class="grid"><tr><th>rule</th><th>node</th><th>scope</th><th>reason</th></tr>{rows}</table></section>'
    )


_CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #222; margin: 0 auto;
       max-width: 1280px; padding: 12px 24px 40px; }
h1 { font-size: 22px; margin: 8px 0 0; } h2 { font-size: 18px; margin: 28px 0 8px; border-bottom: 1px solid #ddd; }
.muted { color: #666; } a { color: #2f5ea8; }
table { border-collapse: collapse; } th, td { text-align: left; vertical-align: top; padding: 3px 10px 3px 0; }
table.grid { font-size: 13px; } table.grid th { border-bottom: 1px solid #bbb; }
table.grid td { border-bottom: 1px solid #eee; font-variant-numeric: tabular-nums; }
table.kv th { color: #555; font-weight: 600; padding-right: 14px; white-space: nowrap; }
table.node { font-size: 12.5px; margin: 4px 0 2px; background: #fafafa; border: 1px solid #eee; }
table.node th, table.node td { padding: 2px 8px; } table.toc td:nth-child(3) { font-family: ui-monospace, monospace; font-size: 12px; }
td.ok { color: #2e7d32; font-weight: 600; } td.fail { color: #c62828; font-weight: 700; }
.badge { display: inline-block; padding: 0 8px; border-radius: 9px; font-size: 12px; font-weight: 700; color: #fff; }
.badge.ok { background: #2e7d32; } .badge.fail { background: #c62828; } .badge.skip { background: #888; }
section.fusion { border: 1px solid #e3e3e3; border-radius: 6px; margin: 10px 0; padding: 4px 12px; }
summary { cursor: pointer; padding: 4px 0; } .rule { font-weight: 700; color: #d9822b; }
.root { font-family: ui-monospace, monospace; font-size: 12.5px; } .scope { color: #7b1fa2; font-size: 12px; }
.pair { display: flex; flex-wrap: wrap; gap: 28px; align-items: flex-start; margin: 6px 0; }
figure { margin: 0; } figcaption { font-size: 12px; color: #555; margin-bottom: 4px; }
svg.graph { max-width: 100%; height: auto; font-family: system-ui, sans-serif; }
"""

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>{css}</style></head>
<body>
{body}
</body></html>
"""
