"""The tool's own child processes are the tool's: their ends never reach the program's SIGCHLD.

A replay's forked child, a re-run's process and the warm zygote are children of the user's process
(`run` runs the program in it). When the program set a SIGCHLD handler, each of their exits would
call it (an extra line on stdout, a counter moved); when it ignores SIGCHLD, the kernel reaps them
and waiting for one fails. While the tool has a child, SIGCHLD has its default disposition (no
handler, children kept for waitpid); afterwards the program's own is back, and when one of the
program's own children ended meanwhile its handler is called for it, as it would have been.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def own_children() -> Iterator[None]:
    chld = getattr(signal, "SIGCHLD", None)
    if chld is None or threading.current_thread() is not threading.main_thread():
        yield  # signal.signal works in the main thread only; elsewhere nothing is changed
        return
    before = signal.getsignal(chld)
    if before in (signal.SIG_DFL, None):
        yield
        return
    signal.signal(chld, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(chld, before)
        if callable(before) and _a_child_ended():
            os.kill(os.getpid(), chld)  # one of the program's children ended while the tool had one


def _a_child_ended() -> bool:
    """A child of this process has ended and waits to be reaped (none of the tool's: those are)."""
    try:
        return os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except (ChildProcessError, OSError, AttributeError):
        return False
