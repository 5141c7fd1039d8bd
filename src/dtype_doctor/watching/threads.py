"""Which watch session handles the module calls of which thread.

A thread that entered `watch()` itself is handled by its own session(s) only: two threads each
inside their own `watch()` never see each other's modules. A thread with no session of its own
(a worker started inside `watch()`) is adopted by the most recently started active session,
which enters its TorchFunctionMode (modes are per thread) around each outermost module call
there, so mismatches inside the worker's module calls are reported too.
"""

from __future__ import annotations

import threading
from typing import Any

_lock = threading.Lock()
_by_thread: dict[int, list[Any]] = {}  # thread id → sessions entered on it, innermost last
_active: list[Any] = []  # every active session, in start order


def entered(session: Any) -> None:
    with _lock:
        _by_thread.setdefault(threading.get_ident(), []).append(session)
        _active.append(session)


def exited(session: Any) -> None:
    """Forget the session, whichever thread it exits from."""
    with _lock:
        if session in _active:
            _active.remove(session)
        for ident, sessions in list(_by_thread.items()):
            if session in sessions:
                sessions.remove(session)
            if not sessions:
                del _by_thread[ident]


def _own_sessions() -> list[Any]:
    return _by_thread.get(threading.get_ident(), [])


def handles(session: Any) -> bool:
    """Does `session` handle module calls made in the current thread?"""
    own = _own_sessions()
    if own:
        return session in own
    active = _active
    return bool(active) and active[-1] is session


class ThreadGate:
    """Used by the module stack: skips other sessions' threads, enters the mode in adopted ones."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self._local = threading.local()

    def enter(self, is_root: bool) -> bool:
        """Before a module call: False if this session does not handle the current thread."""
        if not handles(self.session):
            return False
        if is_root and not _own_sessions() and not getattr(self._local, "mode_on", False):
            self.session._mode.__enter__()
            self._local.mode_on = True
        return True

    def leave(self, stack_empty: bool) -> None:
        """After a module call: the outermost call of an adopted thread ends, so does the mode."""
        if stack_empty and getattr(self._local, "mode_on", False):
            self._local.mode_on = False
            self.session._mode.__exit__(None, None, None)
