"""Where a replay runs, so that nothing it does reaches the user's process, files, terminal or input.

`in_child`: a forked child (CPU, `os.fork` available, CUDA not initialised): standard streams on
/dev/null, the program's other descriptors on /dev/null and its shared memory private
(child_os.py), a scratch working directory, the audit-hook guard (guard.py); it sends back plain data
through a pipe and leaves with `os._exit`. Memory, random generators, hooks, caches and counters are
the child's own copies. `sealed`: the in-process fallback: every generator (torch CPU and CUDA,
`random`, NumPy) saved and restored, forward hooks (global and the modules') suppressed.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import random
import select
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ..tracing.files import library_file
from .child_os import cut_off
from .child_signals import own_children
from .guard import Guard, paused

TIMEOUT_S = 300.0
# a child that has used no CPU for this long waits on something that will not come: a lock another
# thread of the program held at the fork (threads do not follow a fork), a pipe nobody writes
STALLED_S = 15.0
FORCE_IN_PROCESS = "DTYPE_DOCTOR_VERIFY_IN_PROCESS"  # "1": never fork (tests the fallback)


@dataclass
class Outcome:
    """value: what the work returned (plain data); stopped: why it was not let finish, or None."""

    value: Any = None
    stopped: str | None = None


def can_fork() -> bool:
    """A fork is safe here: POSIX, and no CUDA context (a forked child cannot use it)."""
    if not hasattr(os, "fork") or os.environ.get(FORCE_IN_PROCESS) == "1":
        return False
    torch = sys.modules.get("torch")
    return torch is None or not torch.cuda.is_initialized()


def why_no_fork() -> str:
    if not hasattr(os, "fork"):
        return "this platform has no fork"
    if os.environ.get(FORCE_IN_PROCESS) == "1":
        return f"{FORCE_IN_PROCESS}=1 asks for no fork"
    return "CUDA is initialised, which a forked child cannot use"


def in_child(work: Callable[[], Any], timeout: float = TIMEOUT_S) -> Outcome:
    """Run `work` in a forked child under the guard; its result must pickle as plain data."""
    scratch = tempfile.mkdtemp(prefix="dtype-doctor-verify-")
    read_end, write_end = os.pipe()
    try:
        with own_children():
            # paused: a re-run's guard lets the tool's own fork by; 3.12's fork warning is ours, not the user's
            with warnings.catch_warnings(), paused():
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
            if pid == 0:  # pragma: no cover - the child; measured through what it sends back
                os.close(read_end)
                _child(work, scratch, write_end)
            os.close(write_end)
            try:
                return _collect(pid, read_end, timeout)
            except BaseException:  # never leave a child behind, whatever stopped the wait
                with contextlib.suppress(OSError):
                    _stopped(pid, "")
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _child(work: Callable[[], Any], scratch: str, out: int) -> None:
    code = 0
    try:
        cut_off(keep=(out,))  # the program's files, sockets and shared memory out of reach
        payload = _sandboxed(work, scratch)
        data = pickle.dumps(payload)
        while data:
            data = data[os.write(out, data) :]
    except BaseException:
        code = 1
    finally:
        os._exit(code)


def _stopped(pid: int, why: str) -> Outcome:
    """The child killed and reaped: the replay's outcome is `why`."""
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return Outcome(stopped=why)


class _Stall:
    """Whether a child has stopped running: its CPU time (Linux's /proc) unchanged for STALLED_S."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.ticks, self.since = self._ticks(), time.monotonic()

    def _ticks(self) -> int | None:
        try:
            with open(f"/proc/{self.pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            return int(fields[11]) + int(fields[12])  # utime + stime
        except (OSError, ValueError, IndexError):
            return None

    def why(self) -> str | None:
        ticks, now = self._ticks(), time.monotonic()
        if ticks is None or ticks != self.ticks:
            self.ticks, self.since = ticks, now
            return None
        if now - self.since < STALLED_S:
            return None
        return (
            f"the replay stopped running for {STALLED_S:.0f} s: it waits on a lock or a resource that "
            "another thread of your program held (threads do not follow the replay's fork)"
        )


def _sandboxed(work: Callable[[], Any], scratch: str) -> tuple[str, Any]:
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    sys.stdout = sys.__stdout__ = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the child
    sys.stderr = sys.__stderr__ = open(os.devnull, "w")  # noqa: SIM115
    os.chdir(scratch)
    os.environ["TMPDIR"] = scratch
    tempfile.tempdir = scratch
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)  # an OpenMP pool used before the fork may hang in the child
    guard = Guard(scratch)
    guard.install()
    try:
        value = work()
    except Exception as exc:  # Stopped included: the guard's reason wins below
        value = exc
    guard.on = False
    if guard.tripped:
        return ("stopped", guard.tripped)
    if isinstance(value, Exception):
        return ("stopped", f"{type(value).__name__} in the replay")
    return ("done", value)


def _rss(pid: int) -> int | None:
    """The resident memory of a process in bytes (Linux's /proc), None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def memory_bound() -> int | None:
    """The most resident memory a replay forked from this process now may use (bytes): what the
    program holds and as much again and a half, at least 1 GiB more (a deep copy of the model and its
    inputs, and a float32 copy of a half model). None where memory cannot be read."""
    held = _rss(os.getpid())
    return held + max(1 << 30, int(1.5 * held)) if held else None


class _MemoryBound:
    """A replay past its memory bound is stopped, before it takes the machine's memory (and ten
    times the run's time)."""

    def __init__(self, pid: int) -> None:
        self.pid, self.bound = pid, memory_bound()

    def why(self) -> str | None:
        used = _rss(self.pid) if self.bound is not None else None
        if used is None or self.bound is None or used <= self.bound:
            return None
        return (
            f"the replay used {used / 2**30:.1f} GiB of memory, past its bound of "
            f"{self.bound / 2**30:.1f} GiB (what your program held, and as much again and a half)"
        )


def _collect(pid: int, fd: int, timeout: float) -> Outcome:
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    stall, memory = _Stall(pid), _MemoryBound(pid)
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return _stopped(pid, f"the replay did not finish in {timeout:.0f} s")
            ready = select.select([fd], [], [], min(left, 1.0))[0]
            why = memory.why() or (None if ready else stall.why())  # each second: is it still running?
            if why:
                return _stopped(pid, why)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(fd)
    os.waitpid(pid, 0)
    if not chunks:
        return Outcome(stopped="the replay's process ended without a verdict")
    kind, value = pickle.loads(b"".join(chunks))
    if kind == "done":
        return Outcome(value=value)
    return Outcome(stopped=value)


def library_code(obj: Any) -> bool:
    """`obj`'s class is defined in an installed package (not in a file of the user's)."""
    import inspect

    try:
        path = os.path.realpath(inspect.getfile(type(obj)))
    except (TypeError, OSError):
        return False
    return library_file(path)


@contextlib.contextmanager
def sealed(modules: list[Any] = ()) -> Iterator[None]:  # type: ignore[assignment]
    """In-process replay: the random generators as they were afterwards, no forward hook fires."""
    states = generators()
    hooks = _suppress_hooks(modules)
    try:
        yield
    finally:
        hooks()
        restore_generators(states)


def generators() -> dict[str, Any]:
    """The state of every random generator a replay may draw from (random, NumPy, torch CPU/CUDA)."""
    states: dict[str, Any] = {"random": random.getstate()}
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        states["numpy"] = numpy.random.get_state()
    torch = sys.modules.get("torch")
    if torch is not None:
        states["torch"] = torch.random.get_rng_state()
        if torch.cuda.is_initialized():
            states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def restore_generators(states: dict[str, Any]) -> None:
    """Put the generators back as `generators()` saw them: the next replay draws the same numbers."""
    random.setstate(states["random"])
    if "numpy" in states:
        sys.modules["numpy"].random.set_state(states["numpy"])
    torch = sys.modules.get("torch")
    if "torch" in states and torch is not None:
        torch.random.set_rng_state(states["torch"])
    if "cuda" in states and torch is not None:
        torch.cuda.set_rng_state_all(states["cuda"])


_HOOK_DICTS = (
    "_forward_hooks",
    "_forward_pre_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_pre_hooks_with_kwargs",
    "_forward_hooks_always_called",
)


def _suppress_hooks(modules: list[Any]) -> Callable[[], None]:
    """Empty the global forward hooks and those of `modules` (and their submodules); the undo."""
    saved: list[tuple[Any, str, Any]] = []
    torch = sys.modules.get("torch")
    if torch is not None:
        glob = torch.nn.modules.module
        for name in ("_global_forward_hooks", "_global_forward_pre_hooks"):
            saved.append((glob, name, getattr(glob, name)))
            setattr(glob, name, type(getattr(glob, name))())
    for module in modules:
        for sub in module.modules():
            for name in _HOOK_DICTS:
                if getattr(sub, name, None):
                    saved.append((sub, name, getattr(sub, name)))
                    setattr(sub, name, type(getattr(sub, name))())

    def undo() -> None:
        for owner, name, value in reversed(saved):
            setattr(owner, name, value)

    return undo
