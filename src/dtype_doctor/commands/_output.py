"""The command line's side of the one emit (render/outputs.py): the output options every
report-producing command shares (`--output FORMAT[=PATH]`, its aliases `--json`, `--html`,
`compare --plot`; `--fail-on`, `--ignore`), their checks, and the stdout guard that keeps a
machine format on stdout pure while user code runs.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TextIO

from ..errors import DoctorError
from ..render.outputs import Output
from . import FAIL_ON


class _Once(argparse.Action):
    """An option given twice is an error: `--json a.json --json b.json` would silently drop a.json."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        if getattr(namespace, self.dest, None) is not None:
            parser.error(f"{option_string} given twice: give it once")
        if values == "" or (isinstance(values, str) and not values.strip()):
            parser.error(f"{option_string} needs a PATH, got an empty value")
        setattr(namespace, self.dest, values)


# how --help names the older spellings of the output options
ALIAS = "alias kept for one release of"


def add_output_options(parser: argparse.ArgumentParser) -> None:
    """Options every report-producing command shares."""
    from ..render.registry import names

    out = parser.add_argument_group("output")
    out.add_argument(
        "--output-format",
        choices=names(),
        action=_Once,
        metavar="FORMAT",
        help=f"the report's format ({', '.join(names())}), written to --output-file, else to stdout "
        "(html and png need --output-file)",
    )
    out.add_argument(
        "--output-file",
        action=_Once,
        metavar="PATH",
        help="write the report to PATH, in --output-format, else in the format its extension names "
        "(.json, .html, .sarif, .github.txt, .txt, .png)",
    )
    out.add_argument(
        "-o",
        "--output",
        dest="outputs",
        action="append",
        metavar="FORMAT[=PATH]",
        help=f"{ALIAS} --output-format FORMAT [--output-file PATH]; a PATH alone is --output-file PATH; "
        "repeatable",
    )
    out.add_argument(
        "--json",
        nargs="?",
        const="-",
        action=_Once,
        metavar="PATH",
        help=f"{ALIAS} --output-format json [--output-file PATH] (no PATH: stdout)",
    )
    out.add_argument(
        "--html",
        action=_Once,
        metavar="PATH",
        help=f"{ALIAS} --output-format html --output-file PATH",
    )
    out.add_argument("-v", "--verbose", action="store_true", help="show all evidence")
    out.add_argument("--no-color", action="store_true", help="plain text output")
    out.add_argument(
        "-q", "--quiet", action="store_true", help="only one line per finding (the exit code says the rest)"
    )
    out.add_argument(
        "--fail-on",
        choices=FAIL_ON,
        help="exit 1 when a finding of this severity or worse is shown (error: errors only; warning: "
        "warnings too; never: exit 0 whatever is found); for run, the script's own failure wins",
    )
    out.add_argument(
        "--ignore",
        action="append",
        type=family_code,
        metavar="CODE",
        help="leave findings of this family code out of every output and of the exit code (repeatable)",
    )


def family_code(text: str) -> str:
    """A family code of the catalog (argparse type): an unknown one is refused, with the nearest."""
    import difflib

    from .. import catalog

    known = catalog.codes()
    if text in known:
        return text
    near = difflib.get_close_matches(text, known, n=1)
    hint = f" (did you mean {near[0]}?)" if near else " (dtype-doctor explain --help lists them)"
    raise argparse.ArgumentTypeError(f"unknown family code {text!r}{hint}")


def without_ignored(report: Any, args: argparse.Namespace) -> Any:
    """The report less the findings whose code `--ignore` (or the config's `ignore`) names."""
    from ..processors import drop_codes

    codes = getattr(args, "ignore", None)
    return drop_codes(report, codes) if codes else report


def requested_outputs(args: argparse.Namespace) -> list[tuple[str, Output]]:
    """(the option as the user gave it, the output) for every output the command line asks for;
    the console's own output is left to `emit`."""
    from ..render.outputs import parse_output

    fixed = getattr(args, "_fixed_outputs", None)
    if fixed is not None:  # resolved at start (check_output_paths)
        return list(fixed)
    found: list[tuple[str, Output]] = []
    fmt, file = getattr(args, "output_format", None), getattr(args, "output_file", None)
    if fmt or file:
        given = " ".join(
            f"{flag} {v}" for flag, v in (("--output-format", fmt), ("--output-file", file)) if v
        )
        found.append((given, _format_and_file(fmt, file, given)))
    json_target = getattr(args, "json", None)
    if json_target:
        found.append((f"--json {json_target}", Output("json", json_target)))
    for text in getattr(args, "outputs", None) or ():
        found.append((f"--output {text}", parse_output(text)))
    html_target = getattr(args, "html", None)
    if html_target:
        found.append((f"--html {html_target}", Output("html", html_target)))
    if getattr(args, "plot", None):
        found.append((f"--plot {args.plot}", Output("png", plot_path(args))))
    return found


def _format_and_file(fmt: str | None, file: str | None, given: str) -> Output:
    """`--output-format FORMAT` and/or `--output-file PATH` (ruff's spelling) as one output."""
    from ..render import registry
    from ..render.outputs import pick

    if fmt is None and registry.for_extension(str(file)) is None:
        known = ", ".join(registry.get(n).extension for n in registry.names())
        raise DoctorError(f"{given}: no format's extension ends it ({known}): add --output-format FORMAT")
    return pick(fmt, file, needs_path=f"{given} needs a PATH: add --output-file PATH")


def plot_path(args: argparse.Namespace) -> str:
    """Where `compare --plot PNG` writes: a name without extension gets `.png`, as savefig would."""
    keep = os.path.splitext(args.plot)[1] or os.path.isdir(args.plot)  # a folder is refused as it is
    return args.plot if keep else f"{args.plot}.png"


def stdout_taken(args: argparse.Namespace) -> bool:
    """Whether a machine-readable output (JSON, SARIF, GitHub annotations) goes to stdout."""
    from ..render.outputs import to_stdout

    return to_stdout([o for _, o in requested_outputs(args)]) is not None


def input_paths(args: argparse.Namespace) -> list[str]:
    """The files a command reads, from its parsed arguments: the script, logs, the factory's file,
    a config, reports. Names that are no existing file are left out (they are not overwritable)."""
    found: list[str] = []
    for name in ("script", "text", "hf_config"):
        value = getattr(args, name, None)
        if isinstance(value, str) and value not in ("", "-"):
            found.append(value)
    for name in ("file", "reports"):
        found.extend(v for v in getattr(args, name, None) or () if isinstance(v, str) and v != "-")
    target = getattr(args, "target", None)
    if isinstance(target, str) and target:
        found.append(target.rpartition(":")[0] or target)  # model.py:build reads model.py
    hf = getattr(args, "hf_config", None)
    if isinstance(hf, str) and hf:
        found.append(os.path.join(hf, "config.json"))
    out = []
    for path in found:
        try:
            if os.path.isfile(path):
                out.append(path)
        except (OSError, ValueError):
            continue
    return out


def check_output_paths(args: argparse.Namespace, inputs: Sequence[str] = ()) -> None:
    """Fix every output path against the folder the command starts in, before any user code runs
    (a program that changes folder gets its report where the user asked); refuse output paths that
    would clobber each other or one of the command's inputs, and two outputs that both want stdout."""
    from ..render.outputs import check_paths, to_stdout
    from ._output_paths import fixed_at_start, start_dir

    if getattr(args, "_fixed_outputs", None) is None:
        args._start_dir = start_dir()
        args._fixed_outputs = fixed_at_start(requested_outputs(args), args._start_dir)
    given = requested_outputs(args)
    labels = {id(o): label for label, o in given}
    to_stdout([o for _, o in given])
    check_paths([o for _, o in given], [*inputs, *input_paths(args)], lambda o: labels[id(o)])


class _ClosedStdoutNote:
    """Where `--json` goes when stdout is closed: stderr, after a line saying so."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write("dtype-doctor: stdout is closed; the JSON report follows on stderr\n")
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


# Where `--json` (no PATH) writes: the real stdout, saved while user code's output goes to stderr.
_json_stdout: list[TextIO] = []


def real_stdout_is_stderrs_terminal() -> bool:
    """The real stdout (the one json_stdout_guard saved) is the terminal stderr writes to: what goes
    to stderr is read there already."""
    stream = _json_stdout[-1] if _json_stdout else sys.stdout
    try:
        fd = stream.fileno()
        return os.isatty(fd) and os.path.samestat(os.fstat(fd), os.fstat(2))
    except (AttributeError, OSError, ValueError):
        return False


def write_stdout_bytes(data: bytes) -> None:
    """`data` as is on the real stdout (the one json_stdout_guard saved): a diff in its files' bytes."""
    stream = _json_stdout[-1] if _json_stdout else sys.stdout
    stream.flush()
    buffer = getattr(stream, "buffer", None)
    if buffer is None:  # stdout closed (the note writes to stderr), or a text-only stream
        stream.write(data.decode("utf-8", errors="replace"))
    else:
        buffer.write(data)
        buffer.flush()


@contextlib.contextmanager
def json_stdout_guard() -> Iterator[None]:
    """While the command runs, everything written to stdout (print, os.write(1), subprocesses) goes to
    stderr at the file-descriptor level; the JSON report alone goes to the real stdout."""
    stream = sys.stdout
    with contextlib.suppress(Exception):
        stream.flush()
    saved_fd: int | None = None
    json_stream: Any = stream
    try:
        fileno = stream.fileno()
    except (AttributeError, OSError, ValueError):
        fileno = None
    try:
        saved_fd = os.dup(1)
        os.dup2(2, 1)
    except OSError:  # fd 1 or 2 closed: only the Python-level redirect is possible
        saved_fd = None
    if fileno == 1 and saved_fd is not None:
        json_stream = open(saved_fd, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    elif stream is None or (fileno is None and saved_fd is None):  # stdout closed: the report goes to stderr
        json_stream = _ClosedStdoutNote(sys.stderr)
    _json_stdout.append(json_stream)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        _json_stdout.pop()
        for s in (sys.stderr, json_stream):
            with contextlib.suppress(Exception):
                s.flush()
        if saved_fd is not None:
            os.dup2(saved_fd, 1)
            os.close(saved_fd)


def emit(
    report: Any,
    args: argparse.Namespace,
    *,
    console: Any = None,
    path: Callable[[str], str] = str,
    empty: str | None = None,
) -> None:
    """Show a report the way the user asked: every `--output` (and `--json`, `--html`, `--plot`)
    through its renderer, and the console unless a machine format holds stdout.

    `console`: where the console report goes (default stdout; shown even with JSON on stdout when
    given). `path` maps the user's paths (run: one file per rank). `empty`: the line shown instead
    of "no problems found" when the report has no findings. The report shown is kept for
    `exit_status` (`--fail-on`).
    """
    from ..render import outputs
    from ..render.console import make_console
    from ..render.registry import RenderOptions

    report = without_ignored(report, args)
    args.shown_report = report
    given = requested_outputs(args)
    wanted = [o for _, o in given]
    color = False if getattr(args, "no_color", False) else None  # None: rich reads NO_COLOR, FORCE_COLOR
    if not any(o.format == "console" for o in wanted) and (
        console is not None or not outputs.to_stdout(wanted)
    ):
        wanted.insert(0, Output("console"))
    if any(o.format == "console" and not o.to_file for o in wanted):
        console = console or make_console(color=color)
    # a diagnosis the exception note showed on this stream already is not repeated as a panel
    noted = tuple(report.meta.get("noted", ())) if console is not None and console.stderr else ()
    options = RenderOptions(
        verbose=getattr(args, "verbose", False),
        color=color,
        console=console,
        empty=empty,
        quiet=getattr(args, "quiet", False),
        noted=noted,
        base=getattr(args, "_start_dir", None),  # SARIF/GitHub paths: from where the command started
    )
    stream = _json_stdout[-1] if _json_stdout else sys.stdout
    try:
        _never_over_source(report, given, path)
    except DoctorError:  # the report is still shown; no file is written
        outputs.emit(report, [o for o in wanted if not o.to_file], options, stdout=stream, path=path)
        raise
    outputs.emit(report, wanted, options, stdout=stream, path=path)


def _never_over_source(report: Any, given: list[tuple[str, Output]], path: Callable[[str], str]) -> None:
    """Refuse (DoctorError, one line) an output PATH that is a source file the report's fixes edit,
    known only now the program has run: `run -o json=helper.py` would replace the helper."""
    from ..render.outputs import check_paths
    from ._output_paths import source_files

    files = [(label, Output(o.format, path(str(o.path)))) for label, o in given if o.to_file]
    labels = {id(o): label for label, o in files}
    kind = "a source file the report's fixes edit"
    check_paths([o for _, o in files], source_files(report), lambda o: labels[id(o)], kind=kind)
