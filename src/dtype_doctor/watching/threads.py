"""Which watch session handles the module calls of which thread.

A thread that entered `watch()` itself is handled by its own session(s) only: two threads each
inside their own `watch()` never see each other's modules. A thread with no session of its own
(a worker started inside `watch()`) is adopted by the most recently started active session,
which enters its TorchFunctionMode (modes are per thread) around each outermost module call
there, so mismatches inside the worker's module calls are reported too.

A thread started while a session is active runs under that session's mode from its first line
(a one-shot `threading.setprofile` hook enters it, then hands the profiler back): its torch calls
outside any module call are watched too. While a session is active, `threading.excepthook` makes
a thread's uncaught dtype error a finding naming the thread, then calls the user's hook; both
hooks are restored when the last session stops.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

_lock = threading.Lock()
_by_thread: dict[int, list[Any]] = {}  # thread id → sessions entered on it, innermost last
_active: list[Any] = []  # every active session, in start order
_local = threading.local()  # .session: the session whose mode this whole thread runs under
_saved: dict[str, Any] = {}  # the user's profile hook and excepthook while sessions are active


def entered(session: Any) -> None:
    with _lock:
        _by_thread.setdefault(threading.get_ident(), []).append(session)
        _active.append(session)
        if len(_active) == 1:
            _saved["profile"] = threading.getprofile()
            _saved["excepthook"] = threading.excepthook
            threading.setprofile(_thread_start)
            threading.excepthook = _excepthook


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
        if not _active and _saved:
            if threading.getprofile() is _thread_start:  # the user's own, set since, stays
                threading.setprofile(_saved["profile"])
            if threading.excepthook is _excepthook:
                threading.excepthook = _saved["excepthook"]
            _saved.clear()


def _thread_start(frame: Any, event: str, arg: Any) -> Any:
    """A thread's first profile event: run it under the active session's mode, then step aside."""
    previous = _saved.get("profile")
    sys.setprofile(previous)
    with _lock:
        session = _active[-1] if _active else None
    if session is not None and not _own_sessions() and session.active:
        try:
            session.function_mode.__enter__()  # left pushed: the thread's mode stack ends with the thread
            _local.session = session
        except Exception as exc:
            session.internal_error(exc)
    return previous(frame, event, arg) if previous is not None else None


def _excepthook(args: Any) -> None:
    """A thread died of an exception: a dtype error is a finding of the thread's session."""
    hook = _saved.get("excepthook") or threading.__excepthook__
    session = getattr(_local, "session", None)
    if session is None:
        with _lock:
            session = _active[-1] if _active else None
    if session is not None and isinstance(args.exc_value, Exception):
        try:
            from .failures import hide_own_frames, on_thread_exit

            hide_own_frames(args.exc_value)  # its traceback reads as under python
            name = args.thread.name if args.thread is not None else "?"
            on_thread_exit(session, args.exc_value, name)
        except Exception as exc:
            session.internal_error(exc)
    hook(args)


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
        if self.session.tool_rerun():
            return False  # the numerics monitor's own float32 re-runs are not the user's calls
        if (
            is_root
            and not _own_sessions()
            and not getattr(self._local, "mode_on", False)
            and getattr(_local, "session", None) is not self.session  # on since the thread began
        ):
            self.session.function_mode.__enter__()
            self._local.mode_on = True
        return True

    def leave(self, stack_empty: bool) -> None:
        """After a module call: the outermost call of an adopted thread ends, so does the mode."""
        if stack_empty and getattr(self._local, "mode_on", False):
            self._local.mode_on = False
            self.session.function_mode.__exit__(None, None, None)
