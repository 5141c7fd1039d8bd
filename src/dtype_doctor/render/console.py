"""Console renderer built on rich."""

from __future__ import annotations

from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..report import Finding, Report, Severity

_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "bold yellow", Severity.INFO: "bold cyan"}


def render(report: Report, console: Console | None = None, verbose: bool = False, color: bool = True) -> None:
    console = console or Console(no_color=not color, highlight=False, soft_wrap=False)
    for note in report.meta.get("notes", ()):  # what the producer assumed (check: loader, values)
        console.print(Text(str(note), style="dim"))
    if not report.findings:
        console.print(f"[green]dtype-doctor {escape(report.tool)}: no problems found.[/green]")
        return
    for index, finding in enumerate(report.findings, 1):
        console.print(finding_panel(finding, index, verbose))
    console.print(summary_line(report))


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
