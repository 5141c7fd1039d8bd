"""How a SourcePatch (the `--diff` section) looks: console lines and an HTML block, diff coloured.

Read only: the section holds the diff, the changes and the re-run's outcome; nothing is computed here.
"""

from __future__ import annotations

from html import escape
from typing import Any

from rich.text import Text

from ..sections import SourcePatch


def _line_kind(line: str) -> str:
    if line.startswith(("---", "+++")):
        return "file"
    if line.startswith("@@"):
        return "hunk"
    if line.startswith("+"):
        return "add"
    if line.startswith("-"):
        return "del"
    return "ctx"


class DiffText(Text):
    """The diff: printed unwrapped (render() prints it with soft_wrap), so it can be copied as is."""


_RICH = {"file": "bold", "hunk": "cyan", "add": "green", "del": "red", "ctx": ""}


def _heading(section: SourcePatch) -> str:
    n = len(section.changes)
    what = f"{n} change{'s' if n != 1 else ''} to your files"
    if section.verified is True and section.diff:
        return f"patch: {what}, verified by a re-run"
    if section.verified is False:
        return f"patch: {what}, NOT verified"
    return "patch: " + (what if section.diff else "no change proposed")


def patch_renderables(section: SourcePatch) -> list[Any]:
    """The console view: heading, one line per change, the diff, the outcome."""
    style = "bold green" if section.verified else "bold red" if section.verified is False else "bold"
    out: list[Any] = [Text(_heading(section), style=style)]
    for change in section.changes:
        out.append(Text.assemble(("  root cause ", "bold magenta"), change.get("cause", "")))
        out.append(Text.assemble(("    change ", "bold green"), change.get("change", "")))
    if section.diff:
        text = DiffText()
        for i, line in enumerate(section.diff.splitlines()):
            text.append(("\n" if i else "") + line, style=_RICH[_line_kind(line)])
        out.append(text)
    if section.outcome:
        out.append(Text(section.outcome, style="green" if section.verified else "yellow"))
    for path in section.written:
        out.append(Text(f"written: {path}", style="bold green"))
    return out


def patch_html(section: SourcePatch) -> str:
    """The HTML view: the same, the diff in a <pre> with added lines green and removed lines red."""
    state = "ok" if section.verified else "bad" if section.verified is False else ""
    items = "".join(
        f"<li><b>root cause</b> {escape(c.get('cause', ''))}<br><b>change</b> {escape(c.get('change', ''))}</li>"
        for c in section.changes
    )
    lines = "".join(
        f'<span class="d-{_line_kind(line)}">{escape(line)}</span>\n' for line in section.diff.splitlines()
    )
    parts = [f'<h2>{escape(_heading(section))}</h2><div class="patch {state}">']
    if items:
        parts.append(f"<ul>{items}</ul>")
    if lines:
        parts.append(f'<pre class="diff">{lines}</pre>')
    if section.outcome:
        parts.append(f'<p class="outcome">{escape(section.outcome)}</p>')
    parts.extend(f"<p>written: <code>{escape(p)}</code></p>" for p in section.written)
    return "".join(parts) + "</div>"


PATCH_CSS = """
.dtype-doctor pre.diff{background:#fff;border:1px solid var(--line);border-radius:6px;padding:8px 12px;
overflow-x:auto;font:13px/1.45 ui-monospace,"DejaVu Sans Mono",monospace}
.dtype-doctor .d-add{background:#dcfce7;color:#166534}.dtype-doctor .d-del{background:#fee2e2;color:#991b1b}
.dtype-doctor .d-hunk{color:#0e7490}.dtype-doctor .d-file{font-weight:700}
.dtype-doctor .patch.ok .outcome{color:#166534;font-weight:600}
.dtype-doctor .patch.bad .outcome{color:#991b1b;font-weight:600;white-space:pre-wrap}
"""
