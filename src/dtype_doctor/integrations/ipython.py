"""IPython / Jupyter: `%load_ext dtype_doctor`, then

    %%dtype_doctor [--mode observe|strict|fix] [--numerics] [--html PATH]
    image = pipe(prompt).images[0]

runs the cell under `watch` and shows the report as HTML (text in a terminal IPython). In observe
mode an error of the cell is still raised, with the diagnosis in its notes, after the report.
`%dtype_doctor STATEMENT` does the same for one line. Every Report renders as HTML in a notebook.
"""

from __future__ import annotations

import argparse
import re
import shlex
from typing import Any

_NAME = "dtype_doctor"


class _ArgumentError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # a usage error must not SystemExit the kernel
        raise _ArgumentError(f"%%{_NAME}: {message}")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog=f"%%{_NAME}", add_help=False)
    p.add_argument("--mode", choices=("observe", "strict", "fix"), default="observe")
    p.add_argument("--numerics", action="store_true")
    p.add_argument("--model", help="name of the root module in the notebook's namespace")
    p.add_argument("--html", metavar="PATH", help="also write the self-contained HTML report to PATH")
    p.add_argument("--quiet", action="store_true", help="do not display a report without findings")
    return p


_VALUED = ("--mode", "--model", "--html")


_WORD = re.compile(r"""(?:[^\s'"\\]|\\.|'[^']*'|"(?:[^"\\]|\\.)*")+""")


def _split_line(line: str) -> tuple[list[str], str]:
    """Options at the start of a line magic, quoted as a shell (and the cell magic) reads them, then
    the statement as written: `--html 'a b.html' model(x)` gives ['--html', 'a b.html'], 'model(x)'."""
    rest = line.lstrip()
    options: list[str] = []
    expect_value = False
    while rest and (expect_value or rest.startswith("--")):
        match = _WORD.match(rest)
        if match is None:
            raise ValueError(f"%{_NAME}: cannot read the options in {line!r}")
        word = shlex.split(match.group(0))[0] if match.group(0) else ""
        options.append(word)
        rest = rest[match.end() :].lstrip()
        expect_value = not expect_value and word in _VALUED
    return options, rest


def run_cell_under_watch(shell: Any, options: argparse.Namespace, code: str) -> Any:
    """Run `code` in the shell's namespace under watch; display the report; return the session."""
    from IPython.display import display

    from ..watching import watch

    model = shell.user_ns.get(options.model) if options.model else None
    if options.model and model is None:
        raise _ArgumentError(f"%%{_NAME}: --model {options.model}: no such name in the notebook")
    source = shell.transform_cell(code)
    filename = shell.compile.cache(source)  # tracebacks and origins show the cell's own lines
    compiled = shell.compile(source, filename, "exec")
    session = watch(model=model, mode=options.mode, numerics=options.numerics)
    try:
        with session:
            exec(compiled, shell.user_ns)
    finally:
        report = session.report
        report.tool = "notebook"
        if options.html:
            from ..errors import DoctorError
            from ..render.outputs import Output, emit

            try:
                emit(report, [Output("html", options.html)])
            except DoctorError as exc:  # never replace the cell's own outcome
                print(f"%%{_NAME}: {exc}")
        if report.findings or not options.quiet:
            display(report)
    return session


def load_ipython_extension(shell: Any) -> None:
    from IPython.core.magic import Magics, line_cell_magic, magics_class

    @magics_class
    class DtypeDoctorMagics(Magics):
        @line_cell_magic(_NAME)
        def dtype_doctor(self, line: str, cell: str | None = None) -> None:
            """Run a cell (%%dtype_doctor) or a statement (%dtype_doctor STATEMENT) under watch.

            Options: --mode observe|strict|fix, --numerics, --model NAME (root module for
            qualified names), --html PATH (write the report), --quiet (no display when clean).
            """
            try:
                if cell is None:
                    words, code = _split_line(line)
                else:
                    words, code = shlex.split(line), cell
                options = _parser().parse_args(words)
                if not code.strip():
                    raise _ArgumentError(f"%{_NAME}: nothing to run")
            except (_ArgumentError, ValueError) as exc:  # usage: one line, not a traceback
                print(exc)
                return
            try:
                run_cell_under_watch(self.shell, options, code)
            except _ArgumentError as exc:
                print(exc)

    shell.register_magics(DtypeDoctorMagics)
    _register_text_formatter(shell)


def _register_text_formatter(shell: Any) -> None:
    """A terminal IPython shows a Report as the console panels (the notebook uses _repr_html_)."""
    from ..report import Report

    def as_text(report: Report, printer: Any, cycle: bool) -> None:
        from ..render.registry import render

        printer.text(
            str(render("text", report))
            if report.findings
            else f"dtype-doctor {report.tool}: no problems found."
        )

    shell.display_formatter.formatters["text/plain"].for_type(Report, as_text)


def unload_ipython_extension(shell: Any) -> None:
    from ..report import Report

    shell.display_formatter.formatters["text/plain"].pop(Report, None)
