"""Plain-text and JSON renderings of fusion results (the CLI's output)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: PassResult.__str__ imports this module
    from .driver import PassResult


def summary(result: PassResult, dry_run: bool = False) -> str:
    counts = result.counts()
    verb = "would fuse" if dry_run else "fused"
    parts = [f"{n} {rule}" for rule, n in sorted(counts.items())] or ["nothing"]
    line = f"{verb} {', '.join(parts)} in {result.seconds * 1000:.0f} ms"
    if result.near_misses:
        line += f"; {len(result.near_misses)} near-miss(es)"
    return line


def text(result: PassResult, dry_run: bool = False) -> str:
    lines = [summary(result, dry_run)]
    if result.fusions:
        lines.append("")
        lines.append("fusions:")
        for f in result.fusions:
            emitted = ", ".join(_node_text(n) for n in f.nodes if n["op_type"] != "Constant")
            where = "" if f.scope == "main" else f"  [{f.scope}]"
            computes = f"; computes in {f.compute_type}" if f.compute_type else ""
            lines.append(f"  {f.rule:<10} {f.root}  ({len(f.removed)} nodes{computes}) -> {emitted}{where}")
            lines.extend(f"             note: {n}" for n in f.notes)
    if result.near_misses:
        lines.append("")
        lines.append("near-misses (not fused):")
        for m in result.near_misses:
            where = "" if m.scope == "main" else f"  [{m.scope}]"
            lines.append(f"  {m.rule:<10} {m.node}: {m.reason}{where}")
    for w in result.warnings:
        lines.append(f"warning: {w}")
    if getattr(result, "tuning", None) is not None:  # fuse --tune: what was measured (fusion.tune)
        lines += ["", result.tuning.text()]
    return "\n".join(lines)


def to_dict(result: PassResult) -> dict[str, Any]:
    return {
        "modified": result.modified,
        "seconds": round(result.seconds, 4),
        "counts": result.counts(),
        "fusions": [vars(f) for f in result.fusions],
        "near_misses": [{k: v for k, v in vars(m).items() if k not in ("nodes", "would_fuse")} for m in result.near_misses],
        "warnings": result.warnings,
        **({"tuning": result.tuning.to_dict()} if getattr(result, "tuning", None) is not None else {}),
    }


def to_json(result: PassResult) -> str:
    return json.dumps(to_dict(result), indent=2, default=str)


def _node_text(n: dict) -> str:
    attrs = {k: v for k, v in n["attributes"].items() if k not in ("plugin_version", "plugin_namespace")}
    inner = ", ".join(f"{k}={_short(v)}" for k, v in attrs.items())
    return f"{n['op_type']}({inner})"


def _short(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)
