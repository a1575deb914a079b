"""A tiny layered (Sugiyama-style) drawing of a small DAG as inline SVG.

Used by the HTML report to picture a matched subgraph and what replaced it.  Graphviz is not
required: the graphs are a handful of nodes, so a simple layout does: longest-path layers,
dummy points on edges that skip layers, barycenter ordering, and a few averaging passes for
x positions.  Text widths are estimated (no font metrics), so boxes carry some slack.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import count, pairwise

# Box kinds and their colours (fill, stroke).
STYLE = {
    "op": ("#e8f0fe", "#4a6fa5"),
    "fused": ("#fff1e0", "#d9822b"),
    "input": ("#ffffff", "#8a8a8a"),
    "output": ("#eef7ee", "#4c8c4a"),
}
LABEL_PX, DETAIL_PX = 12.0, 10.0
LABEL_CHAR, DETAIL_CHAR = 7.0, 5.9  # estimated advance per character at those sizes
PAD_X, GAP_X, GAP_Y, MARGIN = 10.0, 14.0, 30.0, 8.0
MAX_TEXT = 34  # characters per line before eliding


@dataclass
class Box:
    id: str
    label: str
    detail: str = ""
    kind: str = "op"  # op | fused | input | output
    title: str = ""  # tooltip: full names and values

    @property
    def tensor(self) -> bool:
        return self.kind in ("input", "output")


def elide(text: str, limit: int = MAX_TEXT) -> str:
    """Shorten to ``limit`` characters, keeping both ends (names differ at the end)."""
    if len(text) <= limit:
        return text
    head = (limit - 1) // 2
    return text[:head] + "…" + text[len(text) - (limit - 1 - head):]


def wrap(text: str, limit: int = MAX_TEXT, lines: int = 3) -> list[str]:
    """Comma-separated parts packed greedily into at most ``lines`` lines of ``limit`` characters."""
    if not text:
        return []
    out: list[str] = []
    for part in text.split(", "):
        if out and len(out[-1]) + 2 + len(part) <= limit:
            out[-1] += ", " + part
        else:
            out.append(part)
    if len(out) > lines:
        out = out[: lines - 1] + [", ".join(out[lines - 1:])]
    return [elide(line, limit) for line in out]


@dataclass
class _Item:
    box: Box | None  # None: a dummy point on a long edge
    width: float
    height: float
    layer: int = 0
    x: float = 0.0
    y: float = 0.0


def _size(b: Box) -> tuple[float, float]:
    lines = b.detail.split("\n") if b.detail else []
    w = max([len(b.label) * LABEL_CHAR] + [len(ln) * DETAIL_CHAR for ln in lines]) + 2 * PAD_X
    if b.tensor:
        return max(w, 40.0), 22.0
    return max(w, 52.0), 24.0 + 12.0 * len(lines)


def layered_svg(boxes: Sequence[Box], edges: Sequence[tuple[str, str]], uid: str = "g") -> str:
    """An SVG drawing of the DAG, top to bottom.  ``uid`` keeps marker ids unique in a page."""
    items: dict[str, _Item] = {}
    for b in boxes:
        b = Box(b.id, elide(b.label), "\n".join(wrap(b.detail)), b.kind, b.title)
        items[b.id] = _Item(b, *_size(b))
    edges = [(u, v) for u, v in dict.fromkeys(edges) if u in items and v in items and u != v]
    _assign_layers(items, edges)
    chains, succ, pred = _split_long_edges(items, edges)
    layers = _order(items, succ, pred)
    _place(items, layers, succ, pred)
    return _draw(items, layers, chains, uid)


def _assign_layers(items: dict[str, _Item], edges: list[tuple[str, str]]) -> None:
    """Longest path from the sources; inputs then drop to just above their first reader."""
    preds: dict[str, list[str]] = {k: [] for k in items}
    succs: dict[str, list[str]] = {k: [] for k in items}
    for u, v in edges:
        preds[v].append(u)
        succs[u].append(v)
    indeg = {k: len(p) for k, p in preds.items()}
    ready = [k for k in items if indeg[k] == 0]
    order = []
    while ready:
        k = ready.pop(0)
        order.append(k)
        for v in succs[k]:
            indeg[v] -= 1
            if indeg[v] == 0:
                ready.append(v)
    if len(order) != len(items):  # a cycle cannot come from ONNX, but never loop forever
        order += [k for k in items if k not in order]
    for k in order:
        items[k].layer = max((items[p].layer + 1 for p in preds[k] if p in items), default=0)
    for k in order:
        if not preds[k] and succs[k]:
            items[k].layer = max(0, min(items[v].layer for v in succs[k]) - 1)


def _split_long_edges(items: dict[str, _Item], edges: list[tuple[str, str]]):
    """Dummy points on every layer an edge crosses; returns each edge's chain of ids."""
    fresh = count()
    chains: list[list[str]] = []
    succ: dict[str, list[str]] = {k: [] for k in items}
    pred: dict[str, list[str]] = {k: [] for k in items}
    for u, v in edges:
        chain = [u]
        for layer in range(items[u].layer + 1, items[v].layer):
            d = f"\0dummy{next(fresh)}"
            items[d] = _Item(None, 2.0, 0.0, layer)
            succ[d], pred[d] = [], []
            chain.append(d)
        chain.append(v)
        for a, b in pairwise(chain):
            succ[a].append(b)
            pred[b].append(a)
        chains.append(chain)
    return chains, succ, pred


def _crossings(layers: list[list[str]], succ: dict[str, list[str]]) -> int:
    total = 0
    for upper, lower in pairwise(layers):
        pos = {k: i for i, k in enumerate(lower)}
        ends = [(i, pos[v]) for i, u in enumerate(upper) for v in succ[u] if v in pos]
        for a in range(len(ends)):
            for b in range(a + 1, len(ends)):
                (i1, j1), (i2, j2) = ends[a], ends[b]
                total += (i1 - i2) * (j1 - j2) < 0
    return total


def _order(items: dict[str, _Item], succ, pred) -> list[list[str]]:
    """Barycenter sweeps down and up; keeps the ordering with the fewest crossings."""
    depth = max((it.layer for it in items.values()), default=0) + 1
    layers: list[list[str]] = [[] for _ in range(depth)]
    for k, it in items.items():  # insertion order: the nodes' order in the model
        layers[it.layer].append(k)
    best, best_cross = [list(lay) for lay in layers], _crossings(layers, succ)
    for sweep in range(8):
        down = sweep % 2 == 0
        rng = range(1, depth) if down else range(depth - 2, -1, -1)
        for i in rng:
            ref = layers[i - 1] if down else layers[i + 1]
            pos = {k: j for j, k in enumerate(ref)}
            nbrs = pred if down else succ
            cur = {k: j for j, k in enumerate(layers[i])}
            layers[i].sort(key=lambda k, pos=pos, nbrs=nbrs, cur=cur: (_barycenter(k, pos, nbrs, cur), cur[k]))
        c = _crossings(layers, succ)
        if c < best_cross:
            best, best_cross = [list(lay) for lay in layers], c
    return best


def _barycenter(k: str, pos: dict[str, int], nbrs: dict[str, list[str]], cur: dict[str, int]) -> float:
    """Mean position of ``k``'s neighbours in the reference layer (its own place if none)."""
    ps = [pos[n] for n in nbrs[k] if n in pos]
    return sum(ps) / len(ps) if ps else float(cur[k])


def _pack(layer: list[str], items: dict[str, _Item], want: dict[str, float]) -> None:
    """Centres as close to ``want`` as order and spacing allow (mean of a left and a right push)."""
    n = len(layer)
    sep = [(items[layer[i]].width + items[layer[i + 1]].width) / 2 + GAP_X for i in range(n - 1)]
    left = [want[layer[0]]] if n else []
    for i in range(1, n):
        left.append(max(want[layer[i]], left[-1] + sep[i - 1]))
    right = [0.0] * n
    if n:
        right[-1] = want[layer[-1]]
    for i in range(n - 2, -1, -1):
        right[i] = min(want[layer[i]], right[i + 1] - sep[i])
    for i, k in enumerate(layer):
        items[k].x = (left[i] + right[i]) / 2


def _place(items: dict[str, _Item], layers: list[list[str]], succ, pred) -> None:
    for layer in layers:
        x = 0.0
        for k in layer:
            items[k].x = x + items[k].width / 2
            x += items[k].width + GAP_X
    for sweep in range(12):
        down = sweep % 2 == 0
        seq = layers[1:] if down else layers[-2::-1]
        for layer in seq:
            want = {}
            for k in layer:
                nbrs = (pred if down else succ)[k] + ((succ if down else pred)[k] if sweep >= 6 else [])
                xs = [items[n].x for n in nbrs]
                want[k] = sum(xs) / len(xs) if xs else items[k].x
            _pack(layer, items, want)
    # y: each layer as tall as its tallest box
    y = MARGIN
    for layer in layers:
        h = max((items[k].height for k in layer), default=0.0)
        for k in layer:
            items[k].y = y + h / 2
        y += h + GAP_Y
    lo = min(it.x - it.width / 2 for it in items.values())
    for it in items.values():
        it.x += MARGIN - lo


def _ports(items: dict[str, _Item], chains: list[list[str]]) -> dict[tuple[int, str], float]:
    """Where each edge leaves / enters a box: spread along its side, ordered by the other end's x."""
    out: dict[str, list[tuple[float, int]]] = {}
    inn: dict[str, list[tuple[float, int]]] = {}
    for i, ch in enumerate(chains):
        out.setdefault(ch[0], []).append((items[ch[1]].x, i))
        inn.setdefault(ch[-1], []).append((items[ch[-2]].x, i))
    ports: dict[tuple[int, str], float] = {}
    for side, groups in (("out", out), ("in", inn)):
        for k, lst in groups.items():
            lst.sort()
            it = items[k]
            step = min(14.0, (it.width - 12) / max(len(lst), 1))
            for j, (_, i) in enumerate(lst):
                ports[(i, side)] = it.x + (j - (len(lst) - 1) / 2) * step
    return ports


def _draw(items: dict[str, _Item], layers, chains: list[list[str]], uid: str) -> str:
    width = max((it.x + it.width / 2 for it in items.values()), default=0) + MARGIN
    height = max((it.y + it.height / 2 for it in items.values()), default=0) + MARGIN
    marker = f"arrow-{uid}"
    svg = f'<svg class="graph" width="{width:.0f}" height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" role="img">'
    arrow = (
        f'<defs><marker id="{marker}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#666"/></marker></defs>'
    )
    parts = [svg, arrow]
    ports = _ports(items, chains)
    for i, ch in enumerate(chains):
        pts = [(ports[(i, "out")], items[ch[0]].y + items[ch[0]].height / 2)]
        pts += [(items[d].x, items[d].y) for d in ch[1:-1]]
        pts.append((ports[(i, "in")], items[ch[-1]].y - items[ch[-1]].height / 2 - 1))
        d = f"M{pts[0][0]:.1f},{pts[0][1]:.1f}"
        for (x0, y0), (x1, y1) in pairwise(pts):
            my = (y0 + y1) / 2
            d += f" C{x0:.1f},{my:.1f} {x1:.1f},{my:.1f} {x1:.1f},{y1:.1f}"
        parts.append(f'<path d="{d}" fill="none" stroke="#777" stroke-width="1.2" marker-end="url(#{marker})"/>')
    for it in items.values():
        b = it.box
        if b is None:
            continue
        fill, stroke = STYLE.get(b.kind, STYLE["op"])
        x0, y0 = it.x - it.width / 2, it.y - it.height / 2
        radius = it.height / 2 if b.tensor else 5
        parts.append(f'<g class="node {b.kind}">')
        if b.title:
            parts.append(f"<title>{html.escape(b.title)}</title>")
        parts.append(
            f'<rect x="{x0:.1f}" y="{y0:.1f}" width="{it.width:.1f}" height="{it.height:.1f}" rx="{radius:.1f}" '
            f'fill="{fill}" stroke="{stroke}" stroke-width="{1.8 if b.kind == "fused" else 1.2}"/>'
        )
        weight = "normal" if b.tensor else "bold"
        size = DETAIL_PX + 1 if b.tensor else LABEL_PX
        lines = b.detail.split("\n") if b.detail else []
        ly = y0 + 16 if not b.tensor else it.y + 4
        parts.append(
            f'<text x="{it.x:.1f}" y="{ly:.1f}" text-anchor="middle" font-size="{size:.0f}" font-weight="{weight}" '
            f'fill="#222">{html.escape(b.label)}</text>'
        )
        for j, line in enumerate(lines):
            parts.append(
                f'<text x="{it.x:.1f}" y="{ly + 12 * (j + 1):.1f}" text-anchor="middle" font-size="{DETAIL_PX:.0f}" '
                f'fill="#555">{html.escape(line)}</text>'
            )
        parts.append("</g>")
    parts.append("</svg>")
    return "\n".join(parts)
