"""Console renderer built on rich."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..processors import lift_meta_sections
from ..report import Finding, Report, Severity
from ..sections import CompareResult, EnvFacts
from ..sections import Table as SectionTable

MAX_PANELS = 50  # the console shows this many findings; the JSON and HTML reports hold them all

_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "bold yellow", Severity.INFO: "bold cyan"}


class _Console(Console):
    def on_broken_pipe(self) -> None:
        # rich's default raises SystemExit(1); the CLI treats a closed pipe (`| head`) as the end of output
        self.quiet = True
        raise BrokenPipeError


def make_console(color: bool = True, stderr: bool = False, **kwargs: Any) -> Console:
    """A console for the tool's output; a reader that closes the pipe raises BrokenPipeError."""
    return _Console(no_color=not color, highlight=False, stderr=stderr, **kwargs)


def render(report: Report, console: Console | None = None, verbose: bool = False, color: bool = True) -> None:
    console = console or make_console(color=color, soft_wrap=False)
    for item in renderables(report, verbose):
        console.print(item)


def renderable(report: Report, verbose: bool = False) -> Group:
    """The whole console report as one rich renderable (`Report.__rich__`)."""
    return Group(*renderables(report, verbose))


def renderables(report: Report, verbose: bool = False) -> Iterator[Any]:
    """The sections' tables first (dispatched on their type), then the findings and a summary."""
    report = lift_meta_sections(report)
    for section in report.sections:
        yield from section_renderables(section, wide=verbose)
    if not report.findings:
        yield Text.from_markup(f"[green]dtype-doctor {escape(report.tool)}: no problems found.[/green]")
        return
    shown = report.findings if verbose else report.findings[:MAX_PANELS]
    for index, finding in enumerate(shown, 1):
        yield finding_panel(finding, index, verbose)
    hidden = len(report.findings) - len(shown)
    if hidden:
        yield Text(f"... and {hidden:,} more: see --html, --json or -v", style="bold")
    yield summary_line(report)


def section_renderables(section: Any, wide: bool = False) -> list[Any]:
    from . import tables

    if isinstance(section, CompareResult):
        meta = section.as_meta()
        layers = tables.layers_table(meta, top=10 if wide else 3)
        return [tables.compare_table(meta, wide)] + ([layers] if layers is not None else [])
    if isinstance(section, EnvFacts):
        return list(tables.env_tables(asdict(section)))
    if isinstance(section, SectionTable):
        table = Table(title=section.title, header_style="bold")
        for col in section.columns:
            table.add_column(str(col))
        for row in section.rows:
            table.add_row(*(str(cell) for cell in row))
        return [table]
    return []  # dtype maps and plots are drawn in the HTML report


def summary_line(report: Report) -> Text:
    counts = {s: sum(1 for f in report.findings if f.severity == s) for s in Severity}
    parts = [f"{n} {s.value}{'s' if n != 1 else ''}" for s, n in counts.items() if n]
    return Text(f"dtype-doctor {report.tool}: " + ", ".join(parts), style="bold")


def finding_panel(finding: Finding, index: int = 1, verbose: bool = False) -> Panel:
    parts: list = []
    if finding.message:
        parts.append(Text(finding.message))
    if finding.location and finding.location.describe():
        parts.append(Text.assemble(("where  ", "bold"), finding.location.describe()))
    if finding.operands:
        parts.append(_operands_table(finding, verbose))
    if finding.cause:
        parts.append(Text.assemble(("cause  ", "bold"), finding.cause))
    for rank, fix in enumerate(finding.fixes if verbose else finding.fixes[:3], 1):
        parts.append(Text.assemble((f"fix {rank}  ", "bold green"), fix.title))
        if fix.snippet:
            # plain styled text, not rich.syntax: pygments costs ~0.1 s of start-up, and explain has 0.3 s
            parts.append(Text(_indent(fix.snippet), style="cyan"))
    hidden = len(finding.fixes) - 3
    if hidden > 0 and not verbose:
        parts.append(Text(f"(+{hidden} more fixes: -v)", style="dim"))
    evidence = finding.evidence if verbose else finding.evidence[:1]
    for ev in evidence:
        where = f"line {ev.line}: " if ev.line else ""
        parts.append(Text(f"{where}{ev.text}", style="dim"))
    count = f" ×{finding.count}" if finding.count > 1 else ""
    title = Text.assemble(
        (f"{index}. {finding.severity.value.upper()} ", _STYLE[finding.severity]),
        (finding.code, "bold"),
        (count, "bold magenta"),
        ("  " + finding.title, ""),
    )
    return Panel(
        Group(*parts), title=title, title_align="left", border_style=_STYLE[finding.severity].split()[-1]
    )


def _operands_table(finding: Finding, verbose: bool) -> Table:
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("operand")
    table.add_column("dtype")
    table.add_column("shape")
    table.add_column("origin")
    for op in finding.operands:
        origin = op.origin.describe() if op.origin else (op.name or "")
        if op.origin and verbose:
            for link in op.origin.chain:
                origin += f"\n  ← {link.describe()}"
        shape = "×".join(map(str, op.shape)) if op.shape is not None else ""
        table.add_row(op.role, op.dtype or "?", shape, origin)
    return table


def _indent(snippet: str) -> str:
    return "\n".join("    " + line for line in snippet.splitlines())
