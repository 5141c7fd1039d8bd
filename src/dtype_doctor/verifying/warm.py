"""Warm re-runs: a process that has imported what the user's program imports forks one child per
re-run, so each patched-program re-run starts at its first line instead of paying torch's and the
model libraries' imports again (several seconds each: most of a small re-run).

The parent (the `run` that re-runs) starts it once, with the names of the library modules its own
process holds: modules of the standard library, site-packages and this tool, never the user's files
or anything under the scratch copy. It is a fresh interpreter that imports them and nothing else
(no user code, no watch), and serves requests on its standard input: each child gets the request's
working directory, environment, `sys.path`, standard input from /dev/null and its output in files,
then runs the guarded bootstrap as `python -c` would and ends as an interpreter ends (threads
joined, atexit run, streams flushed). The zygote refuses to serve, and re-runs start cold, when it
is not fork-safe (a thread started while importing) or cannot start; a child that outlives its
timeout is killed with its process group. No torch import here.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import subprocess
import sys
import sysconfig
import tempfile
import time
from typing import Any

from .child_signals import own_children

_SERVE = "import sys; from dtype_doctor.verifying.warm import serve; serve(sys.argv[1])"
_ENV_OFF = "DTYPE_DOCTOR_COLD_RERUNS"  # set (to anything): every re-run starts a fresh interpreter


def _library_dirs() -> tuple[str, ...]:
    names = ("stdlib", "platstdlib", "purelib", "platlib")
    dirs = {os.path.realpath(sysconfig.get_paths()[n]) for n in names}
    here = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # the tool's own package
    return tuple(sorted(dirs | {here}))


_held_before: set[str] = set()  # what this process held before the user's program started
_ALWAYS = ("torch", "numpy", "dtype_doctor")  # what every re-run of a torch program imports


def program_starts() -> None:
    """Remember the modules held now: a host's own (a notebook's, a test runner's warm process)
    are not the program's, and a re-run's zygote does not import them for it."""
    _held_before.update(sys.modules)


def preloadable(anchor: str, scratch: str) -> list[str]:
    """Names of the modules this process holds that a re-run of the same program imports the same
    way: their files in the standard library, site-packages or this tool, none under `anchor` (the
    user's folder) or `scratch`, none the process held before the program started (but torch,
    NumPy and this tool)."""
    libraries = _library_dirs()
    mine = tuple(os.path.realpath(p) + os.sep for p in (anchor, scratch))
    names = []
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if not file or name == "__main__" or name.startswith("__"):
            continue
        if name in _held_before and name.partition(".")[0] not in _ALWAYS:
            continue
        real = os.path.realpath(file)
        if real.startswith(mine) or not real.startswith(libraries):
            continue
        names.append(name)
    return sorted(names, key=lambda n: (n.count("."), n))


class Zygote:
    """The warm process of one parent; `run` answers like a subprocess, or None when it cannot.
    `forked`: the zygote forked before the program (prefork), told the modules on its pipe; else a
    fresh interpreter that imports them."""

    def __init__(self, modules: list[str], env: dict[str, str], forked: _Forked | None = None) -> None:
        self.outputs = tempfile.mkdtemp(prefix="dtype-doctor-warm-")
        self.proc: subprocess.Popen | _Forked
        if forked is not None:
            forked.stdin.write((json.dumps({"modules": modules}) + "\n").encode())
            self.proc = forked
        else:
            listing = os.path.join(self.outputs, "modules.json")
            with open(listing, "w") as fh:
                json.dump(modules, fh)
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _SERVE, listing],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env={**env, "PYTHONDONTWRITEBYTECODE": "1"},
                cwd=self.outputs,
                start_new_session=True,
                bufsize=0,  # unbuffered: a line read leaves the next in the pipe, where select sees it
            )
        self.ready: bool | None = None  # the first answer: whether it serves at all
        self.count = 0

    def _line(self, timeout: float | None) -> dict | None:
        out = self.proc.stdout
        assert out is not None
        ready, _, _ = select.select([out], [], [], timeout)
        if not ready:
            return None
        line = out.readline()
        return json.loads(line) if line else {"gone": True}

    def run(
        self, argv: list[str], cwd: str, env: dict[str, str], timeout: float | None, merged: bool = False
    ) -> tuple[int, str, str] | None:
        """(exit code, stdout, stderr) of `python -c ...argv` run by a forked child; code 124 after
        `timeout`; None when the zygote does not serve (the caller starts the re-run cold).
        `merged`: both streams into one, interleaved as `2>&1` has them (returned as stdout)."""
        if self.ready is None:
            hello = self._line(600)
            self.ready = bool(hello and hello.get("serving"))
        if not self.ready or self.proc.poll() is not None:
            return None
        self.count += 1
        out, err = (
            os.path.join(self.outputs, f"{self.count}.{n}") for n in ("out", "out" if merged else "err")
        )
        request = {"argv": argv, "cwd": cwd, "env": env, "stdout": out, "stderr": err}
        try:
            assert self.proc.stdin is not None
            data = memoryview((json.dumps(request) + "\n").encode())
            while data:  # an unbuffered pipe may take part of it
                data = data[self.proc.stdin.write(data) or 0 :]
        except OSError:
            self.ready = False
            return None
        started = self._line(30)
        if not started or "pid" not in started:
            self.ready = False
            return None
        ended = self._line(timeout)
        code = None
        if ended is None:  # past its time: the child and what it started
            with contextlib.suppress(OSError):
                os.killpg(started["pid"], 9)
            self._line(30)
            code = 124
        elif "status" not in ended:
            self.ready = False
            return None
        texts = []
        for path in (out,) if merged else (out, err):
            try:
                with open(path, encoding="utf-8", errors="replace") as fh:
                    texts.append(fh.read())
                os.remove(path)
            except OSError:
                texts.append("")
        return (ended["status"] if code is None else code), texts[0], texts[1] if len(texts) > 1 else ""

    def close(self) -> None:
        with own_children():
            try:
                if self.proc.stdin is not None:
                    self.proc.stdin.close()
                self.proc.wait(timeout=5)
            except Exception:
                self.proc.kill()
                self.proc.wait()
        import shutil

        shutil.rmtree(self.outputs, ignore_errors=True)


class _Forked:
    """The zygote forked from this process before the user's program ran, as Zygote reads its
    process: two pipes. It is this process's grandchild (never a child the program could wait for)
    and ends when its requests pipe closes, which its answers pipe shows as an end of file."""

    def __init__(self, requests: int, answers: int) -> None:
        self.stdin = os.fdopen(requests, "wb", buffering=0)
        self.stdout = os.fdopen(answers, "rb", buffering=0)
        self.pid = 0
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if end is None else max(0.0, end - time.monotonic())
            ready, _, _ = select.select([self.stdout], [], [], left)
            if not ready:
                raise subprocess.TimeoutExpired("zygote", timeout or 0)
            if not self.stdout.read(65536):
                self.returncode = 0
        return self.returncode

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            if self.pid:
                os.kill(self.pid, 9)
        self.returncode = -9


_preforked: list[_Forked] = []
_command_line: list[bool] = [False]  # this process is the `dtype-doctor` command itself


def process_is_the_command() -> None:
    """The CLI started this process (`dtype-doctor ...`, `python -m dtype_doctor ...`): its state
    before the program is the tool's alone, safe to fork. An API call inside a host (pytest, a
    notebook) leaves it unset: the host's import hooks and handlers are not a re-run's."""
    _command_line[0] = True


def prefork() -> None:
    """Fork the re-runs' zygote now, before the user's program runs: it holds what this process
    holds (torch when it is imported already) and none of the program's state; it imports the
    program's libraries when the first re-run asks. A double fork in a session of its own: no child
    of this process, no terminal signal. Nothing when threads run (they would not survive a fork)
    or re-runs start cold."""
    import threading

    if _preforked or not _command_line[0] or os.environ.get(_ENV_OFF):
        return
    if not hasattr(os, "fork") or sys.platform == "darwin":
        return
    if threading.active_count() != 1:
        return
    try:
        req_r, req_w = os.pipe()
        ans_r, ans_w = os.pipe()
        for stream in (sys.stdout, sys.stderr):  # nothing buffered is copied into the fork
            with contextlib.suppress(Exception):
                stream.flush()
        pid = os.fork()
    except OSError:
        return
    if pid == 0:
        code = 70
        try:
            os.setsid()
            if os.fork() == 0:
                os.close(req_w)
                os.close(ans_r)
                code = _forked_side(req_r, ans_w)
            else:
                code = 0
        finally:
            os._exit(code)
    os.close(req_r)
    os.close(ans_w)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
    forked = _Forked(req_w, ans_r)
    ready, _, _ = select.select([forked.stdout], [], [], 10)
    line = forked.stdout.readline() if ready else b""
    try:
        forked.pid = int(json.loads(line)["zygote"])
    except (ValueError, KeyError, TypeError):
        forked.stdin.close()
        forked.stdout.close()
        return
    _preforked.append(forked)


_parents_streams: list[Any] = []  # in the forked zygote: the tool's stream objects, never closed there


def _forked_side(requests: int, answers: int) -> int:
    """In the forked zygote: a fresh interpreter's streams, hooks and signals, then serve."""
    import io
    import signal
    import threading
    import warnings

    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    atexit._clear()  # the parent's: never run by a re-run
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _parents_streams.extend(
        (sys.stdin, sys.stdout, sys.stderr)
    )  # emptied before the fork: kept, never flushed
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=False)
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(
        io.FileIO(2, "w", closefd=False), line_buffering=True, errors="backslashreplace"
    )
    sys.excepthook, sys.displayhook = sys.__excepthook__, sys.__displayhook__
    threading.excepthook = threading.__excepthook__
    warnings.showwarning = warnings._showwarning_orig  # type: ignore[attr-defined]
    sys.settrace(None)
    sys.setprofile(None)
    os.write(answers, (json.dumps({"zygote": os.getpid()}) + "\n").encode())
    with os.fdopen(requests, "r") as incoming, os.fdopen(answers, "w") as outgoing:
        first = incoming.readline()
        if first:
            _serve(list(json.loads(first).get("modules", [])), incoming, outgoing)
    return 0


_zygotes: dict[tuple[str, ...], Zygote] = {}


def zygote(anchor: str, scratch: str, env: dict[str, str]) -> Zygote | None:
    """This process's warm zygote for the modules it holds now (one per set; started on first use)."""
    if os.environ.get(_ENV_OFF) or not hasattr(os, "fork") or sys.platform == "darwin":
        return None
    modules = preloadable(anchor, scratch)
    key = tuple(modules)
    found = _zygotes.get(key)
    if found is None or found.proc.poll() is not None:
        base = {k: v for k, v in env.items() if k not in ("PYTHONPATH", "TMPDIR")}
        here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
        base["PYTHONPATH"] = os.pathsep.join([here, *sys.path[1:]])
        try:
            found = _zygotes[key] = Zygote(modules, base, _preforked.pop() if _preforked else None)
        except OSError:
            return None
    return found


@atexit.register
def _close_all() -> None:
    for z in _zygotes.values():
        z.close()
    _zygotes.clear()
    while _preforked:  # never used: its requests closed, it ends
        forked = _preforked.pop()
        with contextlib.suppress(Exception):
            forked.stdin.close()
            forked.wait(timeout=5)
        forked.stdout.close()


# -- the zygote's side ---------------------------------------------------------------------------
def serve(listing: str) -> None:
    """Import the listed modules, then fork a child per request line until standard input closes."""
    with open(listing) as fh:
        modules = json.load(fh)
    _serve(modules, sys.stdin, sys.stdout)


def _serve(modules: list[str], requests: Any, answer: Any) -> None:
    import importlib
    import threading

    for name in modules:
        try:
            importlib.import_module(name)
        except BaseException:
            continue
    base_path = [p for p in sys.path if p]
    serving = threading.active_count() == 1  # a thread would not survive the fork
    answer.write(json.dumps({"serving": serving}) + "\n")
    answer.flush()
    if not serving:
        return
    for line in requests:
        request = json.loads(line)
        answer.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os._exit(_child(request, base_path))
        answer.write(json.dumps({"pid": pid}) + "\n")
        answer.flush()
        _, status = os.waitpid(pid, 0)
        answer.write(json.dumps({"status": os.waitstatus_to_exitcode(status)}) + "\n")
        answer.flush()


def _child(request: dict[str, Any], base_path: list[str]) -> int:
    """In the forked child: become `python -c BOOT ...argv` in the request's place, run, end."""
    try:
        os.setpgid(0, 0)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            # appending: one path for both streams interleaves them as `2>&1` does
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
            os.dup2(target, fd)
            os.close(target)
        os.chdir(request["cwd"])
        env = request["env"]
        os.environ.clear()
        os.environ.update(env)
        tempfile.tempdir = None  # read TMPDIR again
        sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
        front = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:] = ["", *front, *[p for p in base_path if p not in front]]
        argv = request["argv"]
        sys.argv = ["-c", *argv[3:]]
    except BaseException:
        return 70
    code = 0
    try:
        exec(compile(argv[2], "<string>", "exec"), {"__name__": "__main__"})
    except SystemExit as stop:
        code = _exit_code(stop)
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    return _finish(code)


def _exit_code(stop: SystemExit) -> int:
    value = stop.code
    if value is None:
        return 0
    if isinstance(value, int):
        return value & 0xFF
    print(value, file=sys.stderr)
    return 1


def _finish(code: int) -> int:
    """What an interpreter does at its end: join non-daemon threads, run atexit, flush."""
    import threading

    with contextlib.suppress(BaseException):
        threading._shutdown()  # type: ignore[attr-defined]
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()
    return code
