"""The audit-hook guard a replay runs under: it stops the replay at the first thing that would reach
past its own process and scratch directory (a file written, a process spawned, a socket, a read of
standard input). No torch import: the patched-program re-run installs it before anything else runs.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

WRITES = "the call writes files"
SPAWNS = "the call spawns processes"
SOCKETS = "the call opens sockets"
READS_INPUT = "the call reads input"
MARKER = "dtype-doctor-guard: stopped: "  # the re-run's stderr line saying why the guard stopped it

_SPAWN_EVENTS = {
    "subprocess.Popen",
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.fork",
    "os.forkpty",
    "pty.spawn",
}
_SOCKET_EVENTS = {"socket.connect", "socket.sendto", "socket.sendmsg"}  # reaching out
_PATH_EVENTS = {  # event -> the positions of its arguments that are paths it changes
    "os.remove": (0,),
    "os.rename": (0, 1),
    "os.replace": (0, 1),
    "os.rmdir": (0,),
    "os.mkdir": (0,),
    "os.truncate": (0,),
    "os.chmod": (0,),
    "os.link": (0, 1),
    "os.symlink": (0, 1),
    "os.utime": (0,),
    "shutil.rmtree": (0,),
    "shutil.copyfile": (1,),
    "shutil.move": (0, 1),
}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


class Stopped(PermissionError):
    """Raised into the replayed code when it reaches outside its sandbox."""


class Guard:
    """Once installed (an audit hook cannot be removed: install it only in a process of the tool's
    own), every event below stops the replay; `tripped` keeps the first reason even if the replayed
    code catches the exception."""

    def __init__(self, scratch: str) -> None:
        self.scratch = os.path.realpath(scratch)
        self.tripped: str | None = None
        self.on = False

    def install(self) -> None:
        global _installed
        sys.addaudithook(self._hook)
        sys.stdin = _RefusingInput(self)
        self.on = True
        _installed = self

    def stop(self, why: str, what: object = "") -> None:
        if self.tripped is None:
            self.tripped = why
            with contextlib.suppress(OSError):  # what: for the one who debugs, after " | "
                os.write(2, f"{MARKER}{why} | {what}\n".encode(errors="replace"))
        raise Stopped(f"dtype-doctor's verification stopped this: {why}")

    def _inside(self, path: Any) -> bool:
        if isinstance(path, int):
            return path in (1, 2)  # standard streams: /dev/null in a replay
        try:
            real = os.path.realpath(os.fsdecode(path))
        except (TypeError, ValueError):
            return False
        return real == os.devnull or real == self.scratch or real.startswith(self.scratch + os.sep)

    def _hook(self, event: str, args: tuple) -> None:
        if not self.on:
            return
        if event == "open":
            path, mode, flags = (*tuple(args), None, None, 0)[:3]
            writing = bool((flags or 0) & _WRITE_FLAGS) or any(c in (mode or "") for c in "wax+")
            if writing and not self._inside(path):
                self.stop(WRITES, path)
        elif event == "os.mkdir" and args and _exists(args[0]):
            return  # makedirs(exist_ok=True) of a folder already there (a library's cache): no change
        elif event in _PATH_EVENTS:
            if not all(self._inside(args[i]) for i in _PATH_EVENTS[event] if i < len(args)):
                self.stop(WRITES, args)
        elif event in _SPAWN_EVENTS and not _a_lookup(event, args):
            self.stop(SPAWNS, args)
        elif event in _SOCKET_EVENTS or (event == "socket.bind" and _a_port(args)):
            self.stop(SOCKETS, args[1:])
        elif event == "builtins.input":
            self.stop(READS_INPUT)
        elif event == "sqlite3.connect" and args and not _in_memory(args[0]) and not self._inside(args[0]):
            self.stop(WRITES, args[0])  # sqlite writes through C: no `open` event would show it

    def guard_torch_writers(self) -> None:
        """torch.save to a path writes through C++ (no `open` event): checked where torch opens it."""
        serialization = sys.modules.get("torch.serialization")
        writer = getattr(serialization, "_open_zipfile_writer_file", None)
        if writer is None or getattr(writer.__init__, "_guarded", False):
            return
        opened = writer.__init__
        guard = self

        def checked(self: Any, name: Any, *args: Any, **kwargs: Any) -> None:
            if guard.on and not guard._inside(name):
                guard.stop(WRITES, name)
            opened(self, name, *args, **kwargs)

        checked._guarded = True  # type: ignore[attr-defined]
        writer.__init__ = checked


def _in_memory(database: Any) -> bool:
    text = os.fsdecode(database) if isinstance(database, str | bytes | os.PathLike) else ""
    return text in ("", ":memory:") or text.startswith("file::memory:")


_LOOPBACK = {"::1", "127.0.0.1", "localhost"}


# programs a library runs only to read a fact of the system as it loads (ctypes.util.find_library asks
# the linker cache `ldconfig -p`, on Python 3.10 at torch's import): they change nothing
_LOOKUPS = {"ldconfig", "uname"}


def _a_lookup(event: str, args: tuple) -> bool:
    if event not in ("subprocess.Popen", "os.posix_spawn") or len(args) < 2:  # both: (program, argv, ...)
        return False
    argv = args[1] if isinstance(args[1], list | tuple) else [args[1]]
    try:
        program = os.path.basename(os.fsdecode(args[0] or argv[0]))
    except (TypeError, ValueError, IndexError):
        return False
    return program in _LOOKUPS


def _a_port(args: tuple) -> bool:
    """A bind anyone could reach: all but an unused port on the loopback interface (urllib3's IPv6
    probe, run by diffusers' import, binds ('::1', 0) and closes). A port 0 on every interface (''),
    a real port, or a Unix socket's path (a file) is stopped."""
    address = args[1] if len(args) > 1 else None
    probe = isinstance(address, tuple) and len(address) > 1 and address[1] == 0 and address[0] in _LOOPBACK
    return not probe


def _exists(path: Any) -> bool:
    try:
        return os.path.isdir(os.fsdecode(path))
    except (TypeError, ValueError):
        return False


_installed: Guard | None = None  # the guard of this process, if any


def installed() -> Guard | None:
    """The guard of this process (a replay's, a re-run's), if any."""
    return _installed


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """The tool's own fork for a nested replay (in a re-run under the guard): let it through; the
    child installs a guard of its own."""
    guard, was = _installed, _installed is not None and _installed.on
    if guard is not None:
        guard.on = False
    try:
        yield
    finally:
        if guard is not None:
            guard.on = was


class _RefusingInput:
    """sys.stdin in a replay: any read stops it."""

    def __init__(self, guard: Guard) -> None:
        self._guard = guard

    def __getattr__(self, name: str) -> Any:  # readlines, buffer, fileno, ...: all reads
        self._guard.stop(READS_INPUT)

    def read(self, *args: Any) -> str:
        self._guard.stop(READS_INPUT)
        return ""

    def readline(self, *args: Any) -> str:
        self._guard.stop(READS_INPUT)
        return ""

    def __iter__(self) -> Any:
        self._guard.stop(READS_INPUT)
        return iter(())

    def isatty(self) -> bool:
        return False


def reason(stderr: str) -> str | None:
    """Why the guard stopped a re-run, from its standard error (None: it did not)."""
    for line in (stderr or "").splitlines():
        if line.startswith(MARKER):
            return line[len(MARKER) :].partition(" | ")[0].strip()
    return None


def bootstrap(scratch: str, module: str, argv: list[str]) -> None:
    """`python -c` entry of the patched-program re-run: the guard first, then `python -m module argv`."""
    import runpy

    Guard(scratch).install()
    sys.argv = [module, *argv]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
