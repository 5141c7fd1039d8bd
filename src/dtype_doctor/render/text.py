"""Findings as plain text (the console panels without colour): for test reports and assertions."""

from __future__ import annotations

import io
from collections.abc import Sequence

from ..report import Finding
from .fold import terminal_width


def render_plain(findings: Sequence[Finding], width: int | None = None) -> str:
    """The panels as plain text, `width` columns (default: the terminal's, else 110)."""
    from rich.console import Console

    from .console import finding_panel

    buf = io.StringIO()
    width = width or terminal_width(fallback=110)
    console = Console(file=buf, no_color=True, width=width, highlight=False, force_terminal=False)
    for index, finding in enumerate(findings, 1):
        console.print(finding_panel(finding, index))
    return buf.getvalue()
