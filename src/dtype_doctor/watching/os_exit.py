"""A program that ends with `os._exit(N)`: python leaves at once (no `finally`, no atexit handler,
no buffer flushed) with status N. Under `run` the program runs in the tool's own process, so the
report would vanish with it: while the program runs, `os._exit` called in this process (not in a
child it forked) first has the report of the run up to there written, then leaves with N as python
does. Nothing of the program's runs in between (its `finally` blocks and atexit handlers stay
skipped); a call that bound `os._exit` before the program started is not seen."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import NoReturn


@contextlib.contextmanager
def reported_os_exit(report_now: Callable[[int], None]) -> Iterator[None]:
    """While inside, `os._exit(status)` in this process calls `report_now(status)` before leaving."""
    real = os._exit
    pid = os.getpid()

    def _exit(status: int) -> NoReturn:
        if os.getpid() == pid and os._exit is _exit:
            os._exit = real  # once: the report's own code never comes back here
            with contextlib.suppress(BaseException):  # the tool's failure never changes the status
                report_now(status)
        real(status)

    os._exit = _exit
    try:
        yield
    finally:
        if os._exit is _exit:
            os._exit = real
