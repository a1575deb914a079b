#!/usr/bin/env python3
"""Issue 14 codemod: move the flat modules of fusion/ into layered subpackages.

Run in a repository root on a clean tree (it uses `git mv`, so history follows the files):

    python .relayout/relayout.py            # do it
    python .relayout/relayout.py --check    # only report what it would stop on

What it does, in order (every step fails loudly, before anything is written, if the tree is
not what it expects):
1. checks every fusion/*.py is known (MOVES or STAY); an unknown module stops it, named;
2. applies the anchored PATCHES (small hand edits that break the import cycles);
3. EXTRACTS a few top-level definitions into new modules (make_feeds & co. out of verify.py;
   the argument parser out of cli.py), with their dependencies computed from the AST;
4. `git mv`s every module to its new place and writes the subpackage __init__.py files;
5. adds tests/test_layers.py (kept beside this script) and rewrites imports (AST: `from .x import`, `from fusion.x import`, `from fusion import x`,
   `import fusion.x`, function-local ones included) and dotted / path mentions
   (`fusion.trt_run.X`, "fusion.verify", `fusion/specs.py`) in every tracked text file:
   fusion/, patterns/, tests/, bench/, notebooks (JSON cells), READMEs, plugin_src, pyproject.
Function bodies are never edited beyond the PATCHES.  Logs what it did; exits 1 on a problem.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

# -- the table: old module (fusion/<name>.py) -> new module under fusion/ -------------------------
MOVES = {
    "ir": "ir.view",
    "graph": "ir.graph",
    "model_io": "ir.model_io",
    "pattern": "match.pattern",
    "specs": "rewrite.specs",
    "functions": "rewrite.functions",
    "rewrite": "rewrite.editor",
    "rules": "rewrite.rules",
    "passes": "passes.driver",
    "report": "passes.text",  # PassResult.__str__ renders through it: it sits beside the driver
    "trt": "trt.build",
    "trt_profiles": "trt.profiles",
    "trt_inspect": "trt.inspect",
    "trt_run": "trt.run",
    "trt_timing": "trt.timing",
    "defaults": "passes.defaults",  # measured default passes per target (issue 11)
    "plugin_lib": "plugins.library",
    "verify": "compare.verify",
    "html_report": "report.html",
    "svg_graph": "report.svg",
    "cli": "cli.commands",
}
# tuning.py (issue 11, `fuse --tune`) builds, times, verifies and reports: an entry point beside api.py.
# options.py (issue 15) holds the option groups fuse/build/verify/deploy share (tuning.py uses them too);
# deployment.py (issue 15, `deploy`) fuses, builds, verifies, times and reports: above tuning.
STAY = {"__init__", "__main__", "errors", "api", "docs", "tuning", "options", "deployment"}
OPTIONAL = {"trt_timing", "defaults"}  # moved when present (they land in main with other branches)

# Subpackages, bottom layer first, with the docstring of their __init__.py.
PACKAGES = {
    "ir": "L1 the model as data: graph view, ModelGraph scopes, load/save, random feeds. Imports only fusion.errors.",
    "match": "L2 the pattern language and the matcher. Imports fusion.ir and fusion.errors only.",
    "rewrite": "L3 plugin specs, reference function bodies, Emitter/Editor and the Rule API. Imports fusion.match and below.",
    "passes": "L5 the pass driver (rules -> PassResult) and its text/JSON rendering. Imports fusion.patterns and below.",
    "trt": "L6 TensorRT: profiles, build, inspect, run, timing (tensorrt imported lazily). Imports fusion.ir and below.",
    "plugins": "L6 building and checking the plugin_src/ library. Imports fusion.rewrite.specs and fusion.errors only.",
    "compare": "L7 proving a fused model equivalent (onnxruntime, or TensorRT via fusion.trt). Imports fusion.trt and below.",
    "report": "L8 HTML and SVG renderings of fusion results. Imports fusion.compare, fusion.passes and below.",
    "cli": "L10 the command line: parser.py (arguments only; fusion.docs reads it) and commands.py (handlers; imports anything).",
}
PACKAGE_INIT_EXTRA = {"cli": "from .commands import main\n\n__all__ = [\"main\"]\n"}

# Top-level definitions that move into a new module (plus every top-level definition they use).
# (source, seeds, new module, names that must not follow, why)
EXTRACTS = [
    ("verify", ["make_feeds"], "ir.feeds", {"verify", "_Model", "VerifyReport"},
     "random feeds sit below both verify and trt.run (breaks trt_run <-> verify)"),
    ("trt_run", ["check_in_profiles", "_cast"], "trt.inputs", {"setup_verify", "ProfiledTrtRunner", "time_engine"},
     "trt.timing (issue 11) binds feeds with these while trt.run imports trt.timing (breaks that cycle)"),
    ("cli", ["make_parser"], "cli.parser", {"main"},
     "fusion.docs reads the parser without importing the handlers (breaks cli <-> docs)"),
]
EXTRACT_DOCS = {
    "ir.feeds": "Random inputs for a model's graph inputs, one feed per shape point (used by fusion.compare and fusion.trt).",
    "trt.inputs": "An engine's inputs: which profile a feed falls in, and feeds cast to TensorRT's input types.",
    "cli.parser": "The argument parser of `python -m fusion`; names its handlers (fusion.cli.commands) as strings.",
}
# In code moved to cli.parser, `set_defaults(func=cmd_x)` becomes `func="cmd_x"`: the parser imports no handler.
HANDLER_REF = re.compile(r"\bfunc=(cmd_\w+)\b")

# Anchored hand edits, applied to today's files before they move: (file, old, new, why).
PATCHES = [
    ("fusion/report.py", "from typing import Any\n", "from typing import TYPE_CHECKING, Any\n",
     "passes <-> report"),
    ("fusion/report.py", "from .passes import PassResult\n",
     "if TYPE_CHECKING:  # annotations only: PassResult.__str__ imports this module\n    from .passes import PassResult\n",
     "passes <-> report"),
    ("fusion/trt_inspect.py",
     "def _make_logger(trt):\n    from .trt import make_logger\n\n    return make_logger(trt)\n",
     "def _make_logger(trt):\n"
     "    # Not trt.build.make_logger: that module imports this one.  Its callers pass their logger.\n"
     "    return trt.Logger(trt.Logger.WARNING)\n",
     "trt <-> trt_inspect"),
    ("fusion/cli.py", "        return int(args.func(args) or 0)\n", "        return int(_handler(args.func)(args) or 0)\n",
     "cli <-> docs: the parser names handlers as strings"),
    ("fusion/cli.py", "\ndef main(argv",
     "\ndef _handler(func):\n"
     "    \"\"\"A handler the parser names as a string (so parser.py imports no handler).\"\"\"\n"
     "    return globals()[func] if isinstance(func, str) else func\n\n\n"
     "def main(argv",
     "cli <-> docs"),
    ("fusion/plugin_lib.py", "REPO_ROOT = Path(__file__).resolve().parent.parent\n",
     "REPO_ROOT = Path(__file__).resolve().parents[2]\n", "the module is one level deeper"),
    ("fusion/__init__.py",
     "# Bound after the submodule import, so `fusion.verify` stays the function even once some\n"
     "# code has imported the module `fusion.verify` (polygraphy itself is imported lazily).\n",
     "# The function; its module is fusion.compare.verify (polygraphy itself is imported lazily).\n",
     "the comparison module no longer shadows the function"),
    ("pyproject.toml", 'packages = ["fusion", "fusion.patterns"]\n', None, "every subpackage is listed"),
]
PATH_OVERRIDES = {"cli": "cli/parser.py"}  # `fusion/cli.py` in prose means the parser (README's CLI table)
SKIP_DIRS = ("bench/results/", "tests/fixtures/", "tests/regressions/", "fusion/examples/", ".relayout/")
TEXT_SUFFIXES = {".py", ".md", ".ipynb", ".toml", ".sh", ".cfg", ".txt", ".h", ".cpp", ".cu", ".cuh", ".yml", ".yaml", ""}


class Stop(Exception):
    pass


def log(msg: str) -> None:
    print(f"relayout: {msg}")


def git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


# -- module names ------------------------------------------------------------------------------


def old_modules(root: Path) -> dict[str, str]:
    """old name -> new dotted module (fusion.x.y) for the modules present."""
    found = {p.stem for p in (root / "fusion").glob("*.py")}
    unknown = sorted(found - set(MOVES) - STAY)
    if unknown:
        raise Stop("unknown module(s) in fusion/: " + ", ".join(f"fusion/{u}.py" for u in unknown)
                   + " -- add a line for each to MOVES (or STAY) in .relayout/relayout.py")
    missing = sorted(set(MOVES) - found - OPTIONAL)
    if missing:
        raise Stop("expected module(s) missing: " + ", ".join(missing) + " (already relaid out?)")
    return {m: "fusion." + MOVES[m] for m in MOVES if m in found}


def file_module(rel: str) -> tuple[str, str]:
    """(module, package) that a .py path was imported as before the move, or None."""
    p = Path(rel)
    if p.parts[0] == "fusion":
        parts = list(p.with_suffix("").parts)
    elif p.parts[0] == "patterns":
        parts = ["fusion", *p.with_suffix("").parts]
    else:
        parts = list(p.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
        return ".".join(parts), ".".join(parts)
    return ".".join(parts), ".".join(parts[:-1])


# -- import rewriting -------------------------------------------------------------------------


class Rewriter:
    def __init__(self, moves: dict[str, str], names: dict[tuple[str, str], str]):
        self.moves = {"fusion." + k: "fusion." + v for k, v in moves.items()}  # fusion.trt -> fusion.trt.build
        self.names = names  # (fusion.verify, make_feeds) -> fusion.ir.feeds
        self.short = sorted(moves, key=len, reverse=True)
        # a module named like an attribute of the package (fusion.verify, the function)
        self.clash = {"verify"}
        alts = "|".join(self.short)
        self.dotted = re.compile(r"(?<![\w.])fusion\.(" + alts + r")(?!\w)(?!:[A-Za-z_])(?:\.(\w+))?")
        self.path = re.compile(r"(?<![\w/.])fusion/(" + alts + r")\.py(?!\w)")

    def target(self, module: str, name: str | None = None) -> str:
        if name is not None and (module, name) in self.names:
            return self.names[(module, name)]
        return self.moves.get(module, module)

    # text mentions ------------------------------------------------------------------------
    def text(self, s: str, skip: list[tuple[int, int]] = ()) -> str:
        def dotted(m: re.Match) -> str:
            if any(a <= m.start() < b for a, b in skip):
                return m.group(0)
            old, attr = m.group(1), m.group(2)
            if old in self.clash and attr is None:
                before, after = s[m.start() - 1 : m.start()], s[m.end() : m.end() + 1]
                if not (before in "\"'" and before and after == before):
                    return m.group(0)  # `fusion.verify` the function
            new = self.target("fusion." + old, attr)
            return new + (f".{attr}" if attr else "")

        def path(m: re.Match) -> str:
            if any(a <= m.start() < b for a, b in skip):
                return m.group(0)
            old = m.group(1)
            return "fusion/" + PATH_OVERRIDES.get(old, self.moves["fusion." + old][len("fusion."):].replace(".", "/") + ".py")

        return self.path.sub(path, self.dotted.sub(dotted, s))

    # python source -----------------------------------------------------------------------
    def python(self, src: str, old_pkg: str | None, new_pkg: str | None) -> str:
        """Rewrite imports (and dotted mentions) of ``src``; old_pkg/new_pkg: its package before/after."""
        tree = ast.parse(src)
        offsets = _line_offsets(src)
        edits: list[tuple[int, int, str]] = []
        spans = []
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            a = offsets[node.lineno - 1] + node.col_offset
            b = offsets[node.end_lineno - 1] + node.end_col_offset
            spans.append((a, b))
            new = self._statement(node, src[a:b], old_pkg, new_pkg)
            if new is not None and new != src[a:b]:
                edits.append((a, b, new))
        out = []
        pos = 0
        for a, b, new in sorted(edits):
            out.append(self.text(src[pos:a], _shift(spans, pos)))
            out.append(new)
            pos = b
        out.append(self.text(src[pos:], _shift(spans, pos)))
        return "".join(out)

    def _statement(self, node, text: str, old_pkg, new_pkg) -> str | None:
        indent = " " * node.col_offset
        if isinstance(node, ast.Import):
            parts, changed = [], False
            for al in node.names:
                head = al.name.split(".")
                if head[0] == "fusion" and len(head) > 1 and "fusion." + head[1] in self.moves:
                    name = self.target("fusion." + head[1]) + "".join("." + h for h in head[2:])
                    changed = True
                else:
                    name = al.name
                parts.append(name + (f" as {al.asname}" if al.asname else ""))
            return f"import {', '.join(parts)}" if changed else None
        module = _resolve(node.module, node.level, old_pkg)
        if module != "fusion" and not module.startswith("fusion."):
            return None
        if "#" in text:
            raise Stop(f"a comment inside an import statement: {text!r}; rewrite it by hand")
        groups: dict[str, list[str]] = {}
        for al in node.names:
            if module == "fusion" and al.name in {k[len("fusion."):] for k in self.moves}:
                tgt = self.moves["fusion." + al.name]
                src_mod, name = tgt.rsplit(".", 1)
                alias = al.asname or al.name
                alias = alias if alias != name else None
            else:
                src_mod, name, alias = self.target(module, al.name), al.name, al.asname
            groups.setdefault(src_mod, []).append(name + (f" as {alias}" if alias else ""))
        moved = old_pkg is not None and new_pkg is not None and old_pkg != new_pkg
        if list(groups) == [module] and not moved:
            return None
        stmts = []
        for src_mod, names in groups.items():
            where = _relative(src_mod, new_pkg) if node.level else src_mod
            if "(" in text and len(groups) == 1:
                body = "".join(f"{indent}    {n},\n" for n in names)
                stmts.append(f"from {where} import (\n{body}{indent})")
            else:
                stmts.append(f"from {where} import {', '.join(names)}")
        return ("\n" + indent).join(stmts)


def _line_offsets(src: str) -> list[int]:
    offs, n = [], 0
    for line in src.splitlines(keepends=True):
        offs.append(n)
        n += len(line)
    offs.append(n)
    return offs


def _shift(spans, pos):
    return [(a - pos, b - pos) for a, b in spans]


def _resolve(module: str | None, level: int, pkg: str | None) -> str:
    if level == 0:
        return module or ""
    if pkg is None:
        raise Stop(f"relative import outside a package: level {level} {module}")
    base = pkg.split(".")
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def _relative(target: str, pkg: str) -> str:
    t, p = target.split("."), pkg.split(".")
    common = 0
    while common < min(len(t), len(p)) and t[common] == p[common]:
        common += 1
    return "." * (len(p) - common + 1) + ".".join(t[common:])


# -- extraction --------------------------------------------------------------------------------


def _defined(stmt) -> list[str]:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [stmt.name]
    if isinstance(stmt, ast.Assign):
        return [t.id for t in stmt.targets if isinstance(t, ast.Name)]
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
        return [stmt.target.id]
    return []


def _used(node) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _is_logger(stmt) -> bool:
    return isinstance(stmt, ast.Assign) and "getLogger(__name__)" in ast.unparse(stmt.value)


def extract(src: str, seeds: list[str], keep: set[str], old: str, handler_strings: bool) -> tuple[str, str, list[str]]:
    """Split ``src``: (moved text, remaining text, moved names).  Fails on a name in ``keep``."""
    tree = ast.parse(src)
    lines = src.splitlines(keepends=True)
    body = tree.body
    defs: dict[str, ast.stmt] = {}
    for s in body:
        for n in _defined(s):
            defs[n] = s
    imports = [s for s in body if isinstance(s, (ast.Import, ast.ImportFrom))]
    for seed in seeds:
        if seed not in defs:
            raise Stop(f"fusion/{old}.py has no top-level {seed!r} to extract")
    chosen: list[ast.stmt] = []
    todo = list(seeds)
    while todo:
        name = todo.pop()
        s = defs[name]
        if s in chosen:
            continue
        if name in keep:
            raise Stop(f"extracting {seeds} from fusion/{old}.py would take {name!r} along; adjust EXTRACTS")
        chosen.append(s)
        used = _used(s)
        if handler_strings:
            used -= {n for n in used if n.startswith("cmd_")}
            refs = {n for n in _used(s) if n.startswith("cmd_")}
            text = ast.get_source_segment(src, s) or ""
            stringable = set(HANDLER_REF.findall(text))
            if refs - stringable:
                raise Stop(f"{name} in fusion/{old}.py uses handler(s) {sorted(refs - stringable)} other than as func=")
        todo += [n for n in used if n in defs and defs[n] not in chosen]
    chosen.sort(key=lambda s: s.lineno)
    loggers = [s for s in chosen if _is_logger(s)]

    def span(s) -> tuple[int, int]:
        start = min([s.lineno] + [d.lineno for d in getattr(s, "decorator_list", [])]) - 1
        while start > 0 and lines[start - 1].lstrip().startswith("#"):
            start -= 1
        up = start
        while up > 0 and not lines[up - 1].strip():
            up -= 1
        if up > 0 and lines[up - 1].startswith("# --"):  # a section header: it goes with its first definition
            start = up - 1
        return start, s.end_lineno

    moved_chunks, cut = [], set()
    for s in chosen:
        a, b = span(s)
        chunk = "".join(lines[a:b]).rstrip("\n") + "\n"
        if handler_strings:
            chunk = HANDLER_REF.sub(r'func="\1"', chunk)
        moved_chunks.append(chunk)
        if s not in loggers:
            cut.update(range(a, b))
    moved_names = [n for s in chosen if s not in loggers for n in _defined(s)]
    rest_lines = [ln for i, ln in enumerate(lines) if i not in cut]
    rest = re.sub(r"\n{4,}", "\n\n\n", "".join(rest_lines))
    # the imports the moved code needs, copied from the source module, restricted to those names
    need = set().union(*(_used(s) for s in chosen))
    head, future = [], ""
    if any(isinstance(s, ast.ImportFrom) and s.module == "__future__" for s in imports):
        future = "from __future__ import annotations\n\n"
    for s in imports:
        if isinstance(s, ast.ImportFrom) and s.module == "__future__":
            continue
        keepn = [al for al in s.names if (al.asname or al.name).split(".")[0] in need]
        if not keepn:
            continue
        names = ", ".join(al.name + (f" as {al.asname}" if al.asname else "") for al in keepn)
        if isinstance(s, ast.Import):
            head.append(f"import {names}\n")
        else:
            gap = "\n" if s.level and head and not head[-1].lstrip().startswith("from .") else ""
            head.append(f"{gap}from {'.' * s.level}{s.module or ''} import {names}\n")
    moved = future + "".join(head) + "\n\n" + "\n\n".join(moved_chunks)
    return moved, rest, moved_names


def add_import(src: str, line: str) -> str:
    """``line`` after the last top-level import of ``src``."""
    tree = ast.parse(src)
    last = max((s.end_lineno for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom))), default=0)
    lines = src.splitlines(keepends=True)
    return "".join(lines[:last] + [line + "\n"] + lines[last:])


# -- the run -----------------------------------------------------------------------------------


def main(argv: list[str]) -> int:
    check_only = "--check" in argv
    root = Path.cwd()
    try:
        if not (root / "fusion" / "__init__.py").is_file() or not (root / "patterns").is_dir():
            raise Stop("run me in the repository root (fusion/ and patterns/ beside each other)")
        if (root / "fusion" / "ir").is_dir():
            raise Stop("fusion/ir/ exists: the layout is already applied")
        dirty = [ln for ln in git("status", "--porcelain", "--untracked-files=no").splitlines() if ".relayout/" not in ln]
        if dirty:
            raise Stop("the work tree has uncommitted changes; commit or stash them first")
        moves = old_modules(root)
        texts: dict[str, str] = {}
        lates = []
        for f, old, new, why in PATCHES:
            t = texts.get(f) or (root / f).read_text(encoding="utf-8")
            if t.count(old) != 1:
                raise Stop(f"patch anchor not found exactly once in {f} ({why}): {old.splitlines()[0]!r}")
            if new is None:  # pyproject: list every package
                pk = ", ".join(f'"fusion.{p}"' for p in PACKAGES)
                new = f'packages = ["fusion", {pk}, "fusion.patterns"]\n'
                lates.append((f, old, new))
                continue
            texts[f] = t.replace(old, new)
        log(f"{len(moves)} modules to move; {len(PATCHES)} patch anchors found")
        if check_only:
            return 0

        # 1. patches (pyproject's package list last: it names new modules)
        late = {f: (old, new) for f, old, new in lates}
        for f, t in texts.items():
            (root / f).write_text(t, encoding="utf-8")
            log(f"patched {f}")
        # 2. extractions: new module texts, kept until after the moves; `from .x` stay old-style
        created: dict[str, tuple[str, str]] = {}  # new path -> (text, old package it was written in)
        names: dict[tuple[str, str], str] = {}
        for old, seeds, new_mod, keep, why in EXTRACTS:
            f = root / "fusion" / f"{old}.py"
            moved, rest, moved_names = extract(f.read_text(encoding="utf-8"), seeds, keep, old, old == "cli")
            rest_tree = ast.parse(rest)
            still = sorted(n for n in moved_names if n in _used(rest_tree))
            if still:
                rest = add_import(rest, f"from .{new_mod} import {', '.join(still)}")
            f.write_text(rest, encoding="utf-8")
            created["fusion/" + new_mod.replace(".", "/") + ".py"] = (moved, "fusion")
            for n in moved_names:
                names[("fusion." + old, n)] = "fusion." + new_mod
            log(f"extracted {', '.join(moved_names)} from fusion/{old}.py into fusion.{new_mod} ({why})")
        # 3. moves
        where: dict[str, tuple[str, str]] = {}  # new path -> (old package, new package)
        for pkg, doc in PACKAGES.items():
            (root / "fusion" / pkg).mkdir(exist_ok=True)
        for old, new in moves.items():
            dst = new.replace(".", "/") + ".py"
            git("mv", f"fusion/{old}.py", dst)
            where[dst] = ("fusion", new.rsplit(".", 1)[0])
        for pkg, doc in PACKAGES.items():
            init = root / "fusion" / pkg / "__init__.py"
            init.write_text(f'"""{doc}"""\n' + ("\n" + PACKAGE_INIT_EXTRA[pkg] if pkg in PACKAGE_INIT_EXTRA else ""),
                            encoding="utf-8")
            git("add", str(init.relative_to(root)))
        for path, (text, old_pkg) in created.items():
            (root / path).write_text(text, encoding="utf-8")
            git("add", path)
            where[path] = (old_pkg, path[: -len(Path(path).name) - 1].replace("/", "."))
        layer_test = Path(__file__).resolve().parent / "test_layers.py"
        if layer_test.is_file() and not (root / "tests" / "test_layers.py").exists():
            (root / "tests" / "test_layers.py").write_text(layer_test.read_text(encoding="utf-8"), encoding="utf-8")
            git("add", "tests/test_layers.py")
            log("added tests/test_layers.py (the layer and cycle check)")
        log(f"moved {len(moves)} modules, created {len(created)}, wrote {len(PACKAGES)} __init__.py")
        # 4. imports and mentions everywhere
        rw = Rewriter({k: v[len("fusion."):] for k, v in moves.items()}, names)
        changed = 0
        me = Path(__file__).resolve()
        inits = {f"fusion/{pkg}/__init__.py" for pkg in PACKAGES} | {"tests/test_layers.py"}  # written new
        for rel in git("ls-files").splitlines():
            if rel in inits or (root / rel).resolve() == me or rel.startswith(SKIP_DIRS) or Path(rel).suffix not in TEXT_SUFFIXES:
                continue
            p = root / rel
            if not p.is_file() or p.is_symlink():
                continue
            try:
                src = p.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
            new = rewrite_file(rw, rel, src, where)
            if new != src:
                p.write_text(new, encoding="utf-8")
                changed += 1
        for old, seeds, new_mod, keep, why in EXTRACTS:  # docstrings last: they name new modules
            p = root / "fusion" / (new_mod.replace(".", "/") + ".py")
            p.write_text(f'"""{EXTRACT_DOCS[new_mod]}"""\n\n' + p.read_text(encoding="utf-8"), encoding="utf-8")
        for f, (old, new) in late.items():
            t = (root / f).read_text(encoding="utf-8")
            if t.count(old) != 1:
                raise Stop(f"patch anchor vanished from {f}: {old!r}")
            (root / f).write_text(t.replace(old, new), encoding="utf-8")
            log(f"patched {f}")
        log(f"rewrote imports and mentions in {changed} files")
        log("done: review `git diff --stat -M HEAD`, run the tests, then commit")
        return 0
    except Stop as e:
        print(f"relayout: STOP: {e}", file=sys.stderr)
        return 1


def rewrite_file(rw: Rewriter, rel: str, src: str, where: dict[str, tuple[str, str]]) -> str:
    suffix = Path(rel).suffix
    if suffix == ".py":
        if rel in where:
            old_pkg, new_pkg = where[rel]
        else:
            old_pkg = new_pkg = file_module(rel)[1] or None
        return rw.python(src, old_pkg, new_pkg)
    if suffix == ".ipynb":
        nb = json.loads(src)
        if json.dumps(nb, indent=1, ensure_ascii=False) + "\n" != src:
            raise Stop(f"{rel} is not in nbformat's layout; cannot rewrite it byte-exactly")
        for cell in nb["cells"]:
            text = "".join(cell["source"])
            if cell["cell_type"] == "code":
                try:
                    new = rw.python(text, None, None)
                except SyntaxError:
                    new = rw.text(text)
            else:
                new = rw.text(text)
            if new != text:
                cell["source"] = new.splitlines(keepends=True)
        return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"
    if suffix == ".md":
        def block(m: re.Match) -> str:
            try:
                return m.group(1) + rw.python(m.group(2), None, None) + m.group(3)
            except SyntaxError:
                return m.group(0)
        parts = re.split(r"(```python\n.*?```)", src, flags=re.DOTALL)
        out = []
        for part in parts:
            m = re.fullmatch(r"(```python\n)(.*?)(```)", part, flags=re.DOTALL)
            out.append(block(m) if m else rw.text(part))
        return "".join(out)
    return rw.text(src)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
