"""Findings as plain text (the console panels without colour): for test reports and assertions."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

from ..report import Finding, Report
from .base import PresentedRenderer
from .fold import terminal_width


class TextRenderer(PresentedRenderer, name="text", extension=".txt"):
    """The findings' panels as plain text, of a presented report (the pytest plugin's section,
    IPython's text display, `assert_dtype_consistent`'s message)."""

    def render(self, report: Report, options: Any) -> str:
        return render_plain(report.findings, options.width)


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
