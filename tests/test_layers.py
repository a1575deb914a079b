"""The package is layered: no module imports a higher layer, and no two modules import each other.

Every import counts, function-local ones included (they still tie the modules together); only
those under ``if TYPE_CHECKING:`` are skipped, as they never run.  The rules in patterns/ are
checked as ``fusion.patterns``.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Bottom first.  A module belongs to the longest entry that names it or a package above it.
# Entries in one tuple are independent of each other (neither may import the other).
LAYERS: list[tuple[str, ...]] = [
    ("fusion.errors",),
    ("fusion.ir",),  # graph view, ModelGraph, load/save, feeds
    ("fusion.match",),  # pattern language, matcher
    ("fusion.rewrite",),  # specs, function bodies, Emitter/Editor, Rule API
    ("fusion.patterns",),  # the rules (top-level patterns/)
    ("fusion.passes",),  # driver, PassResult text
    ("fusion.trt", "fusion.plugins"),
    ("fusion.compare",),  # verify: onnxruntime or TensorRT
    ("fusion.report",),  # HTML, SVG
    ("fusion.options",),  # option groups shared by fuse/build/verify/deploy (and fuse --tune)
    ("fusion.api",),  # fuse, fuse_file, inspect, run, verify's entry
    ("fusion.tuning",),  # fuse --tune: fuses, builds, times, verifies
    ("fusion.deployment",),  # deploy: fuse (or tune), build, verify, time, report
    ("fusion",),  # the package facade (fusion/__init__.py)
    ("fusion.cli.parser",),  # arguments only: fusion.docs reads it
    ("fusion.docs",),
    ("fusion.cli",),
    ("fusion.__main__",),
]


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted((REPO / "fusion").rglob("*.py")):
        rel = path.relative_to(REPO / "fusion")
        if rel.parts[0] == "patterns":  # the development symlink to ../patterns
            continue
        out[_name(["fusion", *rel.with_suffix("").parts])] = path
    for path in sorted((REPO / "patterns").rglob("*.py")):
        rel = path.relative_to(REPO / "patterns")
        out[_name(["fusion", "patterns", *rel.with_suffix("").parts])] = path
    return out


def _name(parts: list[str]) -> str:
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_imports(tree: ast.AST):
    """Import nodes, skipping ``if TYPE_CHECKING:`` bodies."""
    todo = [tree]
    while todo:
        node = todo.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                todo.extend(child.orelse)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child
            todo.append(child)


def _edges(modules: dict[str, Path]) -> dict[str, list[tuple[str, int]]]:
    """module -> [(imported fusion module, line)]."""
    edges: dict[str, list[tuple[str, int]]] = {}
    for mod, path in modules.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        out = edges.setdefault(mod, [])
        for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    parts = parts[: len(parts) - node.level + 1]
                    base = ".".join(parts + ([node.module] if node.module else []))
                # `from pkg import mod` imports the module; `from mod import name` the module
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for t in targets:
                while t not in modules and "." in t:  # `import fusion.x.y` where y is an attribute
                    t = t.rpartition(".")[0]
                if t in modules and t != mod and (t, node.lineno) not in out:
                    out.append((t, node.lineno))
    return edges


def _layer(mod: str) -> tuple[int, str]:
    best = None
    for rank, group in enumerate(LAYERS):
        for entry in group:
            if (mod == entry or mod.startswith(entry + ".")) and (best is None or len(entry) > len(best[1])):
                best = (rank, entry)
    assert best is not None, f"{mod} belongs to no layer: add it to LAYERS in tests/test_layers.py"
    return best


def test_every_module_has_a_layer_and_imports_only_below():
    modules = _modules()
    bad = []
    for mod, targets in _edges(modules).items():
        rank, entry = _layer(mod)
        for t, line in targets:
            trank, tentry = _layer(t)
            if trank > rank or (trank == rank and tentry != entry):
                rel = modules[mod].relative_to(REPO)
                bad.append(f"{rel}:{line}: {mod} imports {t}, but layer {entry!r} may not import {tentry!r}")
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_no_import_cycles():
    modules = _modules()
    edges = _edges(modules)
    graph = {m: sorted({t for t, _ in ts}) for m, ts in edges.items()}
    # Tarjan's strongly connected components
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    lines = []
    for comp in cycles:
        for m in comp:
            for t, line in edges[m]:
                if t in comp:
                    lines.append(f"  {modules[m].relative_to(REPO)}:{line}: {m} imports {t}")
    assert not cycles, "import cycles:\n" + "\n".join(lines)


def test_every_subpackage_says_what_it_holds():
    for init in sorted((REPO / "fusion").glob("*/__init__.py")):
        if init.parent.name == "patterns":
            continue
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        assert doc and "import" in doc.lower(), f"{init.relative_to(REPO)}: a docstring saying what it holds and may import"
