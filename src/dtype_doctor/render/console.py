"""Console renderer built on rich."""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import asdict
from typing import Any

from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..causes import by_cause
from ..report import Finding, Fix, Report, Severity
from ..sections import CompareResult, EnvFacts, SourcePatch
from ..sections import Table as SectionTable
from .fold import fold_code_line
from .patch import DiffText, patch_renderables

MAX_PANELS = 50  # the console shows this many findings; the JSON and HTML reports hold them all

_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "bold yellow", Severity.INFO: "bold cyan"}


class _Console(Console):
    def on_broken_pipe(self) -> None:
        # rich's default raises SystemExit(1); the CLI treats a closed pipe (`| head`) as the end of output
        self.quiet = True
        raise BrokenPipeError


def make_console(color: bool | None = None, stderr: bool = False, **kwargs: Any) -> Console:
    """A console for the tool's output; a reader that closes the pipe raises BrokenPipeError.

    `color=False` (`--no-color`) turns colour off; otherwise rich decides as it does for any program:
    a terminal, `NO_COLOR`, `FORCE_COLOR`, `TERM=dumb`. No colour means no escape of any kind (rich's
    own `no_color` keeps bold and dim): the console then has no colour system at all."""
    import os

    plain = color is False or (color is None and bool(os.environ.get("NO_COLOR")))
    if plain:
        kwargs["color_system"] = None
    return _Console(no_color=True if plain else None, highlight=False, stderr=stderr, **kwargs)


def render(
    report: Report,
    console: Console | None = None,
    verbose: bool = False,
    color: bool | None = None,
    noted: Collection[str] = (),
) -> None:
    """`noted`: findings (`CODE at WHERE`) whose diagnosis this stream showed already (an exception
    note): a one-line reference instead of their panel."""
    console = console or make_console(color=color, soft_wrap=False)
    for item in renderables(report, verbose, noted):
        console.print(item, crop=False, soft_wrap=isinstance(item, DiffText))  # a wide box is not cut


def renderable(report: Report, verbose: bool = False) -> Group:
    """The whole console report as one rich renderable (`Report.__rich__`)."""
    return Group(*renderables(report, verbose))


def renderables(report: Report, verbose: bool = False, noted: Collection[str] = ()) -> Iterator[Any]:
    """The sections' tables first (dispatched on their type), then the findings and a summary, of a
    presented report (processors.present); a finding in `noted` as one line (see render)."""
    for note in report.meta.get("notes", ()):  # how check loaded the model, what values it assumed
        yield Text(str(note), style="dim")
    for section in report.sections:
        yield from section_renderables(section, wide=verbose)
    patches = [p for s in report.sections if isinstance(s, SourcePatch) for p in patch_renderables(s)]
    if not report.findings:
        yield Text.from_markup(f"[green]dtype-doctor {escape(report.tool)}: no problems found.[/green]")
        yield from patches
        return
    groups = by_cause(report)
    shown = groups if verbose else groups[:MAX_PANELS]
    for index, (cause, findings) in enumerate(shown, 1):
        if not verbose and noted_key(findings[0]) in noted:
            yield Text(
                f"{index}. {findings[0].severity.value.upper()} {noted_key(findings[0])}: in the exception's note"
            )
            continue
        yield finding_panel(findings[0], index, verbose, cause=cause, folded=findings[1:])
    hidden = sum(len(findings) for _, findings in groups[len(shown) :])
    if hidden:
        yield Text(f"... and {hidden:,} more: see --html, --json or -v", style="bold")
    if isinstance(report.meta.get("experiment"), dict):
        yield experiment_line(report.meta["experiment"])
    yield summary_line(report)
    yield from patches  # the diff last: what the user acts on


def noted_key(finding: Finding) -> str:
    """How an exception note names its finding (watching.failures.noted_in): `CODE at WHERE`."""
    return f"{finding.code} at {finding.location.describe() if finding.location else ''}"


def section_renderables(section: Any, wide: bool = False) -> list[Any]:
    from . import tables

    if isinstance(section, CompareResult):
        layers = tables.layers_table(section, top=10 if wide else 3)
        return [tables.compare_table(section, wide)] + ([layers] if layers is not None else [])
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


def render_brief(report: Report, console: Console) -> None:
    """Each cause in a few lines: what, where, the root, the best fix (the demo's and a log's view)."""
    if not report.findings:
        console.print(f"[green]dtype-doctor {escape(report.tool)}: no problems found.[/green]")
        return
    groups = by_cause(report)
    for cause, findings in groups:
        f = findings[0]
        more = f" (+{len(findings) - 1} more of this cause)" if len(findings) > 1 else ""
        count = f" ×{f.count}" if f.count > 1 else ""
        console.print(
            Text.assemble(
                ("• " + f.severity.value.upper() + " ", _STYLE[f.severity]),
                (f.code + count, "bold"),
                (f"  {f.title}{more}", ""),
            )
        )
        if f.location and f.location.describe():
            console.print(Text.assemble(("  where ", "bold"), f.location.describe()))
        if cause:
            console.print(Text.assemble(("  root cause ", "bold magenta"), cause))
        if f.fixes and f.severity != Severity.INFO:
            console.print(Text.assemble(("  fix ", "bold green"), f.fixes[0].headline()))
            if f.fixes[0].verification:
                console.print(
                    Text(f"    {f.fixes[0].verification}", style="green" if f.fixes[0].verified else "dim")
                )
            if f.fixes[0].diff or f.fixes[0].snippet:
                console.print(_fix_code(f.fixes[0]), crop=False)
    console.print(summary_line(report))


def render_quiet(report: Report, console: Console) -> None:
    """`--quiet`: one line per finding, most important first, as linters write them
    (`path:line: code [severity] title`, the place the user's own file:line where the finding has
    one); nothing when there is none. Never folded: grep and CI logs read it whole."""
    from ..editing.user_files import is_user_file
    from .places import places, relative

    for finding in report.findings:
        count = f" ×{finding.count}" if finding.count > 1 else ""
        spots = [p for p in places(finding) if p.line]
        spot = next((p for p in spots if is_user_file(p.file)), spots[0] if spots else None)
        head = f"{relative(spot.file) or spot.file}:{spot.line}: " if spot is not None else ""
        line = f"{head}{finding.code}{count} [{finding.severity.value}] {finding.title}"
        console.print(Text(line, style=_STYLE[finding.severity]), soft_wrap=True, crop=False)


def experiment_line(experiment: dict[str, Any]) -> Text:
    """What the experiment tried and what cured (commands/_patch.cure_first)."""
    tried, seconds = experiment.get("tried", 0), experiment.get("seconds", 0)
    sets = f"{tried} edit set{'s' if tried != 1 else ''} re-run in {seconds} s"
    if experiment.get("cured"):
        return Text.assemble(("experiment ", "bold green"), f"{sets}; cured by fix 1 (its edits above)")
    return Text.assemble(
        ("experiment ", "bold yellow"),
        f"{sets}; none cured the program: root not proven ({experiment.get('outcome', '')})",
    )


def summary_line(report: Report) -> Text:
    return Text(summary_text(report), style="bold")


def summary_text(report: Report) -> str:
    """'dtype-doctor watch: 1 error, 2 warnings (3 causes); raised RuntimeError'.

    The causes are the root causes processors.present set, counted over the problems only: an info
    (a dtype map, a note) is not a cause."""
    counts = {s: sum(1 for f in report.findings if f.severity == s) for s in Severity}
    parts = [f"{n} {s.value}{'s' if n != 1 else ''}" for s, n in counts.items() if n]
    text = f"dtype-doctor {report.tool}: " + (", ".join(parts) or "no findings")
    problems = [fs for _, fs in by_cause(report) if any(f.severity != Severity.INFO for f in fs)]
    causes = len(problems)
    if causes < sum(len(fs) for fs in problems):
        text += f" ({causes} cause{'s' if causes != 1 else ''})"
    raised = report.meta.get("raised")
    if raised:
        text += f"; raised {raised}"
    if report.meta.get("ended_by"):
        text += f"; the program ended by {report.meta['ended_by']}: no edit was tried"
    if report.meta.get("interrupted"):
        text += f"; interrupted by {report.meta['interrupted']}: the report covers the run up to then"
    return text


def finding_panel(
    finding: Finding,
    index: int = 1,
    verbose: bool = False,
    cause: str | None = None,
    folded: list[Finding] | None = None,
) -> Panel:
    # the title goes inside the box: a border title is cut mid-word at the console's width
    parts: list = [Text(finding.title, style="bold")]
    if cause:
        parts.append(Text.assemble(("root cause  ", "bold magenta"), cause))
    intended = finding.data.get("intended") if isinstance(finding.data, dict) else None
    if isinstance(intended, dict) and intended.get("evidence"):
        said = f"{intended.get('dtype')}: {intended['evidence']}"
        if intended.get("deliberate"):
            said += f"; {intended['deliberate']}"
        parts.append(Text.assemble(("intended  ", "bold"), said))
    if finding.message:
        parts.append(Text(finding.message))
    if finding.location and finding.location.describe():
        parts.append(Text.assemble(("where  ", "bold"), finding.location.describe()))
    if finding.operands:
        parts.append(_operands_table(finding, verbose))
    folded = folded or []
    shown = folded if verbose or len(folded) <= 4 else folded[:3]
    for other in shown:
        where = other.location.describe() if other.location else other.message
        count = f" ×{other.count}" if other.count > 1 else ""
        parts.append(Text(f"  also {other.code}{count}: {where}", style="dim"))
    if len(shown) < len(folded):
        parts.append(Text(f"  (+{len(folded) - len(shown)} more of this cause: -v)", style="dim"))
    if finding.data.get("verified"):
        parts.append(Text.assemble(("verified  ", "bold green"), str(finding.data["verified"])))
    if finding.cause and (verbose or not folded):
        parts.append(Text.assemble(("cause  ", "bold"), finding.cause))
    for rank, fix in enumerate(finding.fixes if verbose else finding.fixes[:3], 1):
        parts.append(Text.assemble((f"fix {rank}  ", "bold green"), fix.headline()))
        if fix.verification:
            style = "green" if fix.verified else "red" if fix.verified is False else "dim"
            parts.append(Text(f"       {fix.verification}", style=style))
        if fix.diff or fix.snippet:
            # plain styled text, not rich.syntax: pygments costs ~0.1 s of start-up, and explain has 0.3 s
            parts.append(_fix_code(fix))
    hidden = len(finding.fixes) - 3
    if hidden > 0 and not verbose:
        parts.append(Text(f"(+{hidden} more fixes: -v)", style="dim"))
    evidence = finding.evidence if verbose else finding.evidence[:1]
    for ev in evidence:
        where = f"line {ev.line}: " if ev.line else ""
        parts.append(Text(f"{where}{ev.text}", style="dim"))
    count = f" ×{finding.count}" if finding.count > 1 else ""
    more = f" +{len(folded)} more" if folded else ""
    title = Text.assemble(
        (f"{index}. {finding.severity.value.upper()} ", _STYLE[finding.severity]),
        (finding.code, "bold"),
        (count + more, "bold magenta"),
    )
    panel = Panel(
        Group(*parts), title=title, title_align="left", border_style=_STYLE[finding.severity].split()[-1]
    )
    return panel


class _Code:
    """A fix's code, indented, folded at the width it is drawn in (fold_code_line), never wrapped
    at a space (a wrapped line, pasted, is a syntax error; a marked continuation is visibly one).
    A diff's lines are coloured by their first character."""

    def __init__(self, snippet: str, diff: bool = False) -> None:
        self.lines = _indent(snippet).splitlines()
        self.diff = diff

    def _style(self, line: str) -> str:
        if not self.diff:
            return "cyan"
        head = line[4:5]
        return (
            {"+": "green", "-": "red", "@": "magenta"}.get(head, "")
            if line[4:7] not in ("+++", "---")
            else "bold"
        )

    def __rich_console__(self, console: Console, options: Any) -> Iterator[Any]:
        for line in self.lines:
            for piece in fold_code_line(line, options.max_width):
                yield Text(piece, style=self._style(line), no_wrap=True, overflow="ignore")

    def __rich_measure__(self, console: Console, options: Any) -> Any:
        from rich.measure import Measurement

        widest = max(map(len, self.lines), default=0)
        return Measurement(min(widest, 8), min(widest, options.max_width))


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


def _code(snippet: str) -> _Code:
    """A fix's code, indented, folded to the width it is drawn in."""
    return _Code(snippet)


def _fix_code(fix: Fix) -> _Code:
    """A fix as its edits make it (a diff of the user's lines), else its snippet."""
    return _Code(fix.diff, diff=True) if fix.diff else _Code(fix.snippet)
