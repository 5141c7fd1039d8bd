"""The one emit: a report to every output asked for, each through its renderer from the registry.

An `Output` is a format and where it goes: a PATH, `-` (stdout), or None (the format's default:
the console for `console`, stdout for the formats that can go there). Every PATH is checked against
the others and against every input before anything is written, and written whole or not at all.
Used by the CLI (commands/_output.py), `merge`, `compare --plot` and the integrations.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from ..errors import DoctorError
from ..report import Report
from . import registry
from .registry import RenderOptions


@dataclass(frozen=True)
class Output:
    format: str
    path: str | None = None  # None: the format's default place; "-": stdout

    @property
    def to_file(self) -> bool:
        return self.path not in (None, "-")


def parse_output(text: str) -> Output:
    """`FORMAT`, `FORMAT=PATH`, or a bare PATH whose extension names the format (`merged.json`):
    `-o/--output`, the alias of `--output-format FORMAT --output-file PATH`."""
    name, eq, path = text.partition("=")
    if name in registry.names():
        if eq and not path.strip():
            raise DoctorError(f"--output {text}: the PATH after '=' is empty")
        return pick(
            name, path if eq else None, needs_path=f"--output {name} needs a PATH: --output {name}=PATH"
        )
    if registry.for_extension(text) is None:
        raise DoctorError(
            f"--output {text}: not a format ({', '.join(registry.names())}) nor a file ending in one's extension"
        )
    return pick(None, text)


def pick(format: str | None, path: str | None, *, needs_path: str = "", unknown: str = "") -> Output:
    """The output a FORMAT and/or a PATH name: without FORMAT, the format whose extension PATH ends
    in (else DoctorError `unknown`); without PATH, stdout, or DoctorError `needs_path` for a format
    that goes only to a file (html, png)."""
    if format is None:
        inferred = registry.for_extension(str(path))
        if inferred is None:
            raise DoctorError(unknown or f"{path}: no format's extension ends it")
        return Output(inferred, path)
    if path is None and format != "console" and not registry.get(format).to_stdout:
        raise DoctorError(needs_path or f"{format} needs a PATH")
    return Output(format, path)


def to_stdout(outputs: Sequence[Output]) -> Output | None:
    """The machine-readable output that takes stdout (at most one), or None."""
    taken = [o for o in outputs if o.format != "console" and not o.to_file]
    if len(taken) > 1:
        raise DoctorError(
            f"{' and '.join(o.format for o in taken)} both want stdout: give one of them a PATH"
        )
    return taken[0] if taken else None


def _same_file(a: str, b: str) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)  # hard links, bind mounts
    except (OSError, ValueError):
        return False


def check_paths(
    outputs: Sequence[Output],
    inputs: Sequence[str] = (),
    label: Callable[[Output], str] = str,
    kind: str = "one of the inputs",
) -> None:
    """Refuse output paths that would clobber each other or one of the inputs (by real path, so a
    symlink or `./name` to an input is refused too). `label` names an output as the user gave it;
    `kind`, what the inputs are to the user."""
    seen: dict[str, Output] = {}
    for output in outputs:
        if not output.to_file:
            continue
        path = str(output.path)
        real = os.path.realpath(path)
        if real in seen:
            raise DoctorError(
                f"{label(seen[real])} and {label(output)} name the same file {path}: give two paths"
            )
        seen[real] = output
        if os.path.isdir(path):
            raise DoctorError(
                f"cannot write {path}: it is a directory (give a {registry.get(output.format).extension} path)"
            )
        for source in inputs:
            if _same_file(source, path) and os.path.isfile(source):
                raise DoctorError(f"{label(output)} is {kind} ({source}): it would be overwritten")


def _in_place(path: str) -> bool:
    """A character device, FIFO, socket or /dev/fd/N: written where it is, never replaced."""
    if path.startswith(("/dev/", "/proc/")):
        return True
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False  # a new file
    return not stat.S_ISREG(mode)


def write(path: str, data: str | bytes) -> None:
    """Write `data` to `path` whole or not at all (a signal mid-write leaves no half report).

    A regular file is replaced atomically: a temporary file in the same folder, renamed onto it
    (through a symlink, onto the file it points at), its folder made first if missing; a device, a
    FIFO or /dev/fd/N (`--json=>(jq .)`) is written in place. Text is UTF-8, undecodable characters
    escaped.
    """
    raw = data if isinstance(data, bytes) else data.encode("utf-8", errors="backslashreplace")
    if _in_place(path):
        try:
            with open(path, "wb") as fh:
                fh.write(raw)
        except OSError as exc:
            raise DoctorError(f"cannot write {path}: {exc.strerror or exc}") from None
        return
    real = os.path.realpath(path)
    folder, name = os.path.split(real)
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")  # same folder: one rename
    created = False
    try:
        os.makedirs(folder, exist_ok=True)  # `-o out/r.sarif` makes out/, as pytest's --junitxml does
        with open(tmp, "xb") as fh:  # new, with the umask's permissions like any file the user writes
            created = True
            fh.write(raw)
        os.replace(tmp, real)
    except OSError as exc:
        if created:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise DoctorError(f"cannot write {path}: {exc.strerror or exc}") from None


def emit(
    report: Report,
    outputs: Sequence[Output],
    options: RenderOptions | None = None,
    *,
    stdout: TextIO | None = None,
    path: Callable[[str], str] = str,
) -> None:
    """Render `report` once per output and send each where it goes. The console output goes to
    `options.console` (default: stdout, unless a machine format holds stdout); `stdout` is where
    `-` writes; `path` maps a PATH (run: one file per rank). The processors run once per chain."""
    options = options or RenderOptions()
    done: dict[tuple, Report] = {}
    for output in outputs:
        renderer = registry.get(output.format)
        if output.format == "console" and not output.to_file:
            text = renderer.render(registry.prepare(renderer, report, done), options)
            send(options.console.file if options.console is not None else sys.stdout, text)
            continue
        file_options = RenderOptions(
            verbose=options.verbose, color=False, width=options.width, base=options.base
        )
        data = renderer.render(registry.prepare(renderer, report, done), file_options)
        if output.to_file:
            write(path(str(output.path)), data)
        else:
            send(
                stdout or sys.stdout,
                data if isinstance(data, str) else data.decode("utf-8", errors="replace"),
            )


def send(stream: Any, text: str) -> None:
    """Write `text` to a stream and flush it. A reader that closed the pipe (`| true`, `| head -1`)
    ends the output there, not the command: the stream's descriptor is pointed at /dev/null (so no
    later flush fails again) and the command's exit status stands, as a program's own status stands
    when the reader of its output leaves."""
    try:
        stream.write(text)
        stream.flush()
    except BrokenPipeError:
        reader_gone(stream)


def reader_gone(stream: Any) -> None:
    """The reader of `stream` closed the pipe: its descriptor now writes to /dev/null."""
    with contextlib.suppress(AttributeError, OSError, ValueError):
        fd = stream.fileno()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    with contextlib.suppress(OSError, ValueError):
        stream.flush()  # what the pipe refused goes to /dev/null now, not to the next flush's error
