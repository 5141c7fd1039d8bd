"""One self-contained HTML file for a Report: inline CSS and SVG, no script, no network.

Draws the findings, then the report's typed sections (sections.py) by type: a DtypeMap as the
module tree, Table/Plot sections as tables and SVG charts, CompareResult and EnvFacts through
render/views.py; finding.data["plots"] are drawn inside their finding.
Every text from the report is escaped; the renderer computes nothing about the model.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from html import escape
from typing import Any

from ..causes import by_cause
from ..dtype_map import report_map
from ..report import Finding, Operand, Origin, Report, Severity
from ..sections import SourcePatch
from .base import PresentedRenderer
from .patch import PATCH_CSS, patch_html
from .svg import render_plot
from .views import section_views

_STRUCTURED_META = ("dtype_map", "plots", "tables", "compare", "env")  # schema-1 keys, now sections

DTYPE_COLOURS = {
    "float32": "#2563eb",
    "float16": "#ea580c",
    "bfloat16": "#7c3aed",
    "float64": "#0d9488",
    "float8_e4m3fn": "#be185d",
    "float8_e5m2": "#be185d",
    "mixed": "#dc2626",
}
_OTHER_COLOUR = "#64748b"

_PAGE_CSS = """
body{font:14px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:#0f172a;
background:#f8fafc;margin:0;padding:24px 32px;max-width:1200px}
"""

# Scoped to .dtype-doctor so that the fragment embedded in a notebook styles nothing else.
_CSS = """
.dtype-doctor{--fg:#0f172a;--muted:#64748b;--line:#e2e8f0;color:var(--fg)}
.dtype-doctor *{box-sizing:border-box}
.dtype-doctor h1{font-size:22px;margin:0 0 4px}
.dtype-doctor h2{font-size:17px;margin:28px 0 10px;border-bottom:1px solid var(--line);padding-bottom:4px}
.dtype-doctor .muted{color:var(--muted)}
.dtype-doctor .msg{white-space:pre-wrap}
.dtype-doctor .summary span{display:inline-block;margin-right:10px;padding:2px 10px;border-radius:12px;
color:#fff;font-weight:600}
.dtype-doctor .sev-error{background:#dc2626}.dtype-doctor .sev-warning{background:#d97706}
.dtype-doctor .sev-info{background:#0891b2}
.dtype-doctor .finding{background:#fff;border:1px solid var(--line);border-left:6px solid #dc2626;
border-radius:6px;padding:12px 16px;margin:12px 0}
.dtype-doctor .finding.warning{border-left-color:#d97706}.dtype-doctor .finding.info{border-left-color:#0891b2}
.dtype-doctor .finding h3{margin:0 0 6px;font-size:15px}
.dtype-doctor .code{font-family:ui-monospace,"DejaVu Sans Mono",monospace;background:#f1f5f9;padding:1px 6px;
border-radius:4px}
.dtype-doctor .badge{display:inline-block;padding:0 8px;border-radius:10px;color:#fff;font-size:12px;
font-weight:600;margin-right:6px}
.dtype-doctor .count{color:#a21caf;font-weight:700}
.dtype-doctor table{border-collapse:collapse;margin:6px 0;font-size:13px}
.dtype-doctor th,.dtype-doctor td{text-align:left;padding:3px 10px 3px 0;vertical-align:top}
.dtype-doctor th{color:var(--muted);font-weight:600;border-bottom:1px solid var(--line)}
.dtype-doctor pre{background:#0f172a;color:#e2e8f0;padding:8px 12px;border-radius:6px;overflow-x:auto;
font:12.5px/1.45 ui-monospace,"DejaVu Sans Mono",monospace;margin:4px 0 8px}
.dtype-doctor .root-cause{color:#a21caf}.dtype-doctor details.folded{margin:0 0 12px 24px}
.dtype-doctor .fix{margin:6px 0}.dtype-doctor .fix b{color:#15803d}
.dtype-doctor .why{color:var(--muted);font-size:13px}
.dtype-doctor .evidence{color:var(--muted);font-family:ui-monospace,"DejaVu Sans Mono",monospace;
font-size:12px;white-space:pre-wrap}
.dtype-doctor .chain{color:var(--muted);font-size:12px}
.dtype-doctor .tree ul{list-style:none;margin:0;padding-left:18px;border-left:1px dashed var(--line)}
.dtype-doctor .tree>ul{padding-left:0;border:0}.dtype-doctor .tree li{margin:1px 0}
.dtype-doctor .tree summary{cursor:pointer}
.dtype-doctor .tree .name{font-family:ui-monospace,"DejaVu Sans Mono",monospace}
.dtype-doctor .tree .type{color:var(--muted);font-size:12px;margin-left:4px}
.dtype-doctor .tree .dt{display:inline-block;padding:0 6px;border-radius:8px;color:#fff;font-size:11px;
margin-left:4px}
.dtype-doctor .tree .hit,.dtype-doctor .tree .hit a{color:#dc2626;font-weight:700;margin-left:6px}
.dtype-doctor .legend{display:inline-flex;align-items:center;margin-right:14px;font-size:12px}
.dtype-doctor .legend i{display:inline-block;width:12px;height:12px;border-radius:3px;margin-right:4px}
.dtype-doctor figure.plot{background:#fff;border:1px solid var(--line);border-radius:6px;padding:8px 12px;
margin:12px 12px 12px 0;display:inline-block}
.dtype-doctor figcaption{font-weight:600;margin-bottom:4px}
.dtype-doctor svg text{font:11px system-ui,"DejaVu Sans",sans-serif;fill:#334155}
.dtype-doctor svg .axis{stroke:#334155}.dtype-doctor svg .grid{stroke:#e2e8f0}
"""


def render_html(report: Report) -> str:
    """The whole report as one HTML document (str), of a presented report (processors.present)."""
    tool = report.tool or "report"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>dtype-doctor {escape(tool)}</title>",
        f"<style>{_PAGE_CSS}</style>" + style() + "</head><body>",
        fragment(report),
        "</body></html>",
    ]
    return "\n".join(parts)


class HtmlRenderer(PresentedRenderer, name="html", extension=".html", to_stdout=False):
    def render(self, report: Report, options: Any) -> str:
        return render_html(report)


def style() -> str:
    """The stylesheet as a <style> element (Jupyter embeds it next to the fragment)."""
    return f"<style>{_CSS}{PATCH_CSS}</style>"


def fragment(report: Report) -> str:
    """The report body without <html>/<head>, for embedding (Jupyter's _repr_html_); of a presented
    report (processors.present)."""
    out = [f"<h1>dtype-doctor {escape(report.tool or 'report')}</h1>", _summary(report)]
    out.append(_facts(report.meta))
    if report.findings:
        out.append("<h2>Findings</h2>")
        out.extend(_causes(report))
    tree = _tree(report)
    if tree:
        out.append("<h2>Module tree by dtype</h2>" + _dtype_legend() + tree)
    tables, plots = section_views(report)
    for table in tables:
        out.append(f"<h2>{escape(str(table.get('title', 'Table')))}</h2>" + _table(table))
    if plots:
        out.append("<h2>Plots</h2>" + "".join(render_plot(p) for p in plots))
    out.extend(patch_html(s) for s in report.sections if isinstance(s, SourcePatch))
    return '<div class="dtype-doctor">' + "\n".join(p for p in out if p) + "</div>"


def _causes(report: Report) -> list[str]:
    """Causes first: each root cause once, its other findings folded under it (anchors keep the
    finding's index in report.findings, which the module tree links to)."""
    index = {id(f): i for i, f in enumerate(report.findings, 1)}
    out = []
    for cause, findings in by_cause(report):
        head, rest = findings[0], findings[1:]
        out.append(_finding(head, index[id(head)], cause))
        if rest:
            inner = "\n".join(_finding(f, index[id(f)]) for f in rest)
            out.append(
                f'<details class="folded"><summary>{len(rest)} more finding{"s" if len(rest) != 1 else ""}'
                f" of this cause</summary>\n{inner}</details>"
            )
    return out


def _as_list(value: Any) -> list:
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]


def _plots(value: Any) -> Iterable[Mapping[str, Any]]:
    return (p for p in _as_list(value) if isinstance(p, Mapping))


def _summary(report: Report) -> str:
    if not report.findings:
        return '<p class="summary"><span style="background:#16a34a">no problems found</span></p>'
    counts = {s: sum(1 for f in report.findings if f.severity == s) for s in Severity}
    spans = "".join(
        f'<span class="sev-{s.value}">{n} {s.value}{"s" if n != 1 else ""}</span>'
        for s, n in counts.items()
        if n
    )
    return f'<p class="summary">{spans}</p>'


def _facts(meta: Mapping[str, Any]) -> str:
    rows = [
        (k, v)
        for k, v in meta.items()
        if k not in _STRUCTURED_META and isinstance(v, str | int | float | bool | list) and v != []
    ]
    if not rows:
        return ""
    body = "".join(
        f"<tr><th>{escape(str(k))}</th><td>{escape(', '.join(map(str, v)) if isinstance(v, list) else str(v))}"
        "</td></tr>"
        for k, v in rows
    )
    return f'<table class="facts">{body}</table>'


def _dtype_badge(dtype: str | None) -> str:
    text = dtype or "?"
    colour = DTYPE_COLOURS.get(text, _OTHER_COLOUR)
    return f'<span class="badge" style="background:{colour}">{escape(text)}</span>'


def _finding(f: Finding, index: int, cause: str | None = None) -> str:
    sev = f.severity.value
    count = f' <span class="count">×{f.count}</span>' if f.count > 1 else ""
    out = [
        f'<section class="finding {sev}" id="finding-{index}">',
        f'<h3>{index}. <span class="badge sev-{sev}">{sev.upper()}</span>'
        f'<span class="code">{escape(f.code)}</span>{count} {escape(f.title)}</h3>',
    ]
    if cause:
        out.append(f'<p class="root-cause"><b>root cause</b> {escape(cause)}</p>')
    if f.message:
        out.append(f'<p class="msg">{escape(f.message)}</p>')
    if f.location and f.location.describe():
        out.append(f"<p><b>where</b> {escape(f.location.describe())}</p>")
    if f.operands:
        out.append(_operands(f.operands))
    if f.cause:
        out.append(f"<p><b>cause</b> {escape(f.cause)}</p>")
    for rank, fix in enumerate(f.fixes, 1):
        lang = f' class="language-{escape(fix.language)}"' if fix.language else ""
        snippet = f"<pre{lang}>{escape(fix.snippet)}</pre>" if fix.snippet else ""
        why = f'<div class="why">{escape(fix.why)}</div>' if fix.why else ""
        if fix.verification:
            why += f'<div class="why verification">{escape(fix.verification)}</div>'
        out.append(f'<div class="fix"><b>fix {rank}</b> {escape(fix.headline())}{why}{snippet}</div>')
    for ev in f.evidence:
        where = f"line {ev.line}: " if ev.line else ""
        source = f"{ev.source}: " if ev.source else ""
        out.append(f'<div class="evidence">{escape(source + where + ev.text)}</div>')
    data_plots = list(_plots(f.data.get("plots"))) + list(_plots(f.data.get("plot")))
    out.extend(render_plot(p) for p in data_plots)
    out.append("</section>")
    return "\n".join(out)


def _origin_text(origin: Origin) -> str:
    text = escape(origin.describe())
    if origin.chain:
        links = "<br>".join(f"← {escape(link.describe())}" for link in origin.chain)
        text += f'<div class="chain">{links}</div>'
    return text


def _operands(operands: list[Operand]) -> str:
    rows = []
    for op in operands:
        shape = "×".join(map(str, op.shape)) if op.shape is not None else ""
        origin = _origin_text(op.origin) if op.origin else escape(op.name or "")
        rows.append(
            f"<tr><td>{escape(op.role)}</td><td>{_dtype_badge(op.dtype)}</td>"
            f"<td>{escape(shape)}</td><td>{origin}</td></tr>"
        )
    return (
        "<table><tr><th>operand</th><th>dtype</th><th>shape</th><th>origin</th></tr>"
        + "".join(rows)
        + "</table>"
    )


def _table(table: Mapping[str, Any]) -> str:
    columns = [str(c) for c in table.get("columns", [])]
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    rows = "".join(
        "<tr>" + "".join(f"<td>{escape(str(cell))}</td>" for cell in row) + "</tr>"
        for row in table.get("rows", [])
        if isinstance(row, list | tuple)
    )
    return f"<table><tr>{head}</tr>{rows}</table>"


def _dtype_legend() -> str:
    return (
        "<div>"
        + "".join(
            f'<span class="legend"><i style="background:{c}"></i>{escape(d)}</span>'
            for d, c in DTYPE_COLOURS.items()
            if not d.startswith("float8")
        )
        + "</div>"
    )


class _Node:
    __slots__ = ("children", "dtypes", "findings", "type")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.dtypes: dict[str, int] = {}
        self.type = ""
        self.findings: list[int] = []


_MAX_TREE_DEPTH = 200


def _tree(report: Report) -> str:
    root = _Node()

    def node_for(path: str) -> _Node:
        node = root
        parts = [p for p in path.split(".") if p]
        if len(parts) > _MAX_TREE_DEPTH:  # the tree is drawn recursively: the deepest levels share one row
            parts[_MAX_TREE_DEPTH - 1 :] = [".".join(parts[_MAX_TREE_DEPTH - 1 :])]
        for part in parts:
            node = node.children.setdefault(part, _Node())
        return node

    entries = report_map(report)
    for entry in entries:
        node = node_for(entry.path)
        node.type = entry.type + (f" ×{entry.repeat}" if entry.repeat > 1 else "")
        node.dtypes = dict(entry.dtypes)
    for index, f in enumerate(report.findings, 1):
        loc = f.location
        if loc is None or loc.module is None:
            continue
        node = node_for(loc.module)
        node.findings.append(index)
        if not entries:  # no map: colour by what the finding saw
            node.type = node.type or (loc.module_type or "")
            for op in f.operands:
                if op.dtype:
                    node.dtypes[op.dtype] = node.dtypes.get(op.dtype, 0) + 1
    if not root.children and not root.dtypes:
        return ""
    return '<div class="tree"><ul>' + _tree_node("(root)", root, 0) + "</ul></div>"


def _subtree_dtypes(node: _Node) -> set[str]:
    found = set(node.dtypes)
    for child in node.children.values():
        found |= _subtree_dtypes(child)
    return found


def _has_findings(node: _Node) -> bool:
    return bool(node.findings) or any(_has_findings(c) for c in node.children.values())


def _tree_node(name: str, node: _Node, depth: int) -> str:
    own = sorted(node.dtypes, key=lambda d: -node.dtypes[d])
    shown = own or sorted(_subtree_dtypes(node))
    mixed = len(shown) > 1
    badges = "".join(
        f'<span class="dt" style="background:{DTYPE_COLOURS.get(d, _OTHER_COLOUR)}">{escape(d)}</span>'
        for d in shown
    )
    if mixed:
        badges += f'<span class="dt" style="background:{DTYPE_COLOURS["mixed"]}">mixed</span>'
    hits = ""
    if node.findings:
        links = ", ".join(f'<a href="#finding-{i}">#{i}</a>' for i in node.findings)
        hits = f'<span class="hit">⚠ {links}</span>'
    type_ = f'<span class="type">{escape(node.type)}</span>' if node.type else ""
    label = f'<span class="name">{escape(name)}</span>{type_}{badges}{hits}'
    if not node.children:
        return f"<li>{label}</li>"
    is_open = depth < 2 or _has_findings(node)
    kids = "".join(_tree_node(k, c, depth + 1) for k, c in node.children.items())
    return (
        f"<li><details{' open' if is_open else ''}><summary>{label}</summary><ul>{kids}</ul></details></li>"
    )
