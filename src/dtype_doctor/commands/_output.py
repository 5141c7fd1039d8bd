"""The one way a command shows its report: console, JSON (stdout or file), HTML.

Also the output options every report-producing command shares, their checks, and the stdout
guard that keeps `--json` on stdout pure JSON while user code runs.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import stat
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TextIO

from ..errors import DoctorError


class _Once(argparse.Action):
    """An option given twice is an error: `--json a.json --json b.json` would silently drop a.json."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        if getattr(namespace, self.dest, None) is not None:
            parser.error(f"{option_string} given twice: give it once")
        if values == "" or (isinstance(values, str) and not values.strip()):
            parser.error(f"{option_string} needs a PATH, got an empty value")
        setattr(namespace, self.dest, values)


def add_output_options(parser: argparse.ArgumentParser) -> None:
    """Options every report-producing command shares."""
    out = parser.add_argument_group("output")
    out.add_argument(
        "--json",
        nargs="?",
        const="-",
        action=_Once,
        metavar="PATH",
        help="write the report as JSON to PATH, or to stdout when no PATH is given",
    )
    out.add_argument(
        "--html", action=_Once, metavar="PATH", help="write a self-contained HTML report to PATH"
    )
    out.add_argument("-v", "--verbose", action="store_true", help="show all evidence")
    out.add_argument("--no-color", action="store_true", help="plain text output")
    out.add_argument(
        "-q", "--quiet", action="store_true", help="only one line per finding (the exit code says the rest)"
    )


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


def _same_file(a: str, b: str) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)  # hard links, bind mounts
    except (OSError, ValueError):
        return False


def check_output_paths(args: argparse.Namespace, inputs: Sequence[str] = ()) -> None:
    """Refuse output paths that would clobber each other or one of the command's inputs (by real
    path, so a symlink or `./name` to an input is refused too)."""
    given = [(opt, getattr(args, opt.lstrip("-"), None)) for opt in ("--json", "--html", "--output")]
    targets = [(opt, p) for opt, p in given if p and p != "-"]
    seen: dict[str, str] = {}
    sources = [*inputs, *input_paths(args)]
    for option, path in targets:
        real = os.path.realpath(path)
        if real in seen:
            raise DoctorError(f"{seen[real]} and {option} name the same file {path}: give two paths")
        seen[real] = option
        for source in sources:
            if _same_file(source, path) and os.path.isfile(source):
                raise DoctorError(f"{option} {path} is one of the inputs ({source}): it would be overwritten")


def _in_place(path: str) -> bool:
    """A character device, FIFO, socket or /dev/fd/N: written where it is, never replaced."""
    if path.startswith(("/dev/", "/proc/")):
        return True
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False  # a new file
    return not stat.S_ISREG(mode)


def write(path: str, text: str) -> None:
    """Write `text` to `path` whole or not at all (a signal mid-write leaves no half report).

    Only a regular file is replaced atomically (a temporary file renamed onto it, through a symlink
    to the file it points at); a device, a FIFO or /dev/fd/N (`--json=>(jq .)`) is written in place.
    """
    # backslashreplace: undecodable bytes of the user's text (surrogates) are shown, not fatal
    if _in_place(path):
        try:
            with open(path, "w", encoding="utf-8", errors="backslashreplace") as fh:
                fh.write(text)
        except OSError as exc:
            raise DoctorError(f"cannot write {path}: {exc.strerror or exc}") from None
        return
    real = os.path.realpath(path)
    tmp = f"{real}.tmp-{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8", errors="backslashreplace") as fh:
            fh.write(text)
        os.replace(tmp, real)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise DoctorError(f"cannot write {path}: {exc.strerror or exc}") from None


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


def write_json_stdout(report: Any) -> None:
    from ..render.json import render_json

    stream = _json_stdout[-1] if _json_stdout else sys.stdout
    stream.write(render_json(report))
    stream.flush()


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
    """Show a report the way the user asked: console, JSON (stdout or file), HTML.

    `console`: where the console report goes (default stdout; skipped for `--json` on stdout unless
    given). `path` maps the user's paths (run: one file per rank). `empty`: the line shown instead
    of "no problems found" when the report has no findings.
    """
    from ..processors import present
    from ..render.console import make_console, render, render_quiet

    report = present(report)  # the processors every output shares, once; the renderers only read
    json_target = getattr(args, "json", None)
    if json_target == "-":
        write_json_stdout(report)
    elif json_target:
        from ..render.json import render_json

        write(path(json_target), render_json(report))
    if json_target != "-" or console is not None:
        color = False if getattr(args, "no_color", False) else None  # None: rich reads NO_COLOR, FORCE_COLOR
        console = console or make_console(color=color)
        if getattr(args, "quiet", False):
            render_quiet(report, console)
        elif empty is not None and not report.findings:
            console.print(empty)
        else:
            # a diagnosis the exception note showed on this stream already is not repeated as a panel
            noted = report.meta.get("noted", ()) if console.stderr else ()
            render(report, console=console, verbose=getattr(args, "verbose", False), color=color, noted=noted)
    html_target = getattr(args, "html", None)
    if html_target:
        from ..render.html import render_html

        write(path(html_target), render_html(report))
