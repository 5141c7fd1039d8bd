"""The console output as a renderer: rich's panels and tables, drawn for the console the user sees
(`RenderOptions.console`: its width, colour and terminal) or, for a PATH, as plain text."""

from __future__ import annotations

import io

from rich.markup import escape

from ..report import Report
from .base import PresentedRenderer
from .console import make_console, render, render_quiet
from .registry import RenderOptions


class ConsoleRenderer(PresentedRenderer, name="console", extension=".console.txt"):
    def render(self, report: Report, options: RenderOptions) -> str:
        console = options.console
        if console is None:  # to a file: no colour codes, the width asked for
            console = make_console(color=False, file=io.StringIO(), width=options.width or 100)
        with console.capture() as captured:
            if options.quiet:
                render_quiet(report, console)
            elif options.empty is not None and not report.findings:
                console.print(escape(options.empty))
            else:
                render(
                    report, console=console, verbose=options.verbose, color=options.color, noted=options.noted
                )
        return captured.get()
