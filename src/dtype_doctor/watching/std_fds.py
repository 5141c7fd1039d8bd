"""The standard streams as the program left them, made fit for the report again.

A program may close `sys.stderr`, close file descriptor 1 or 2 itself (`os.close(2)`), or close it
and open a file of its own that takes the number. Python says nothing more after such a program, and
ends with its exit code. The tool still has a report to write (`--json`, the console): a descriptor
the program closed is pointed at /dev/null, so nothing written to it fails (it could not be read
anyway), and a descriptor the program reused stays the program's file (the tool's stream goes to
/dev/null instead, never into that file).
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any

_STREAMS = ((1, "stdout"), (2, "stderr"))


def _identity(fd: int) -> tuple[int, int] | None:
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class StdStreams:
    """Taken before the program runs; `restore()` after it ended."""

    def __init__(self) -> None:
        self.files = {fd: _identity(fd) for fd, _ in _STREAMS}
        self.streams = {name: getattr(sys, name) for _, name in _STREAMS}

    def restore(self) -> None:
        for fd, name in _STREAMS:
            before, now = self.files[fd], _identity(fd)
            stream = getattr(sys, name)
            if before is not None and now is None:  # closed by the program: nothing reads it any more
                _devnull_onto(fd)
            elif before is not None and now != before:  # a file of the program's own took the number
                setattr(sys, name, open(os.devnull, "w"))  # noqa: SIM115 (the process's stream from now)
                continue
            if getattr(stream, "closed", False):  # `sys.stderr.close()`: the stream it replaced, or a new one
                saved = self.streams[name]
                setattr(sys, name, saved if not getattr(saved, "closed", True) else _reopen(fd))


def _devnull_onto(fd: int) -> None:
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        if devnull != fd:
            os.dup2(devnull, fd)
            os.close(devnull)


def _reopen(fd: int) -> Any:
    try:
        return open(fd, "w", encoding="utf-8", errors="backslashreplace", closefd=False)
    except OSError:
        return open(os.devnull, "w")
