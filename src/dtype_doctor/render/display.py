"""How a Report shows itself: `str(report)`, rich's `console.print(report)`, Jupyter's
`_repr_html_`. The package's __init__ registers these in `report.DISPLAY`, so the data model never
imports a renderer. Each presents the report (processors.present) and hands it to a renderer."""

from __future__ import annotations

import io
import shutil
from typing import Any

from ..processors import present
from ..report import Report
from .console import make_console, render, renderable
from .html import fragment, style


def text(report: Report) -> str:
    """The console report as plain text at the terminal's width (`COLUMNS`, else the terminal's, else
    110 columns for a file or pipe), no colour."""
    buf = io.StringIO()
    width = shutil.get_terminal_size((110, 24)).columns
    render(present(report), console=make_console(color=False, file=buf, width=width, force_terminal=False))
    return buf.getvalue().rstrip("\n")


def rich(report: Report) -> Any:
    return renderable(present(report))


def html(report: Report) -> str:
    """The HTML report's body, scoped style first (what Jupyter embeds)."""
    return style() + fragment(present(report))
