"""`dtype-doctor run script.py args...`: run a program as __main__ under `watch`.

The program sees its own sys.argv and keeps its exit code; its exceptions keep their
traceback, with the diagnosis added as notes. The report goes to stderr (and --json).
Under torchrun each rank writes its own report (RANK env).
"""

from __future__ import annotations

import builtins
import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import runpy
import signal
import sys
import threading
import time
import traceback
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import DoctorError
from ..processors import tag_rank
from ..report import Report
from .os_exit import reported_os_exit
from .std_fds import StdStreams

TRY_ENV = "DTYPE_DOCTOR_TRY"  # = experiment.intervene.ENV (no torch import here)


@dataclass
class RunOptions:
    target: str
    argv: list[str]
    is_module: bool = False
    mode: str = "observe"
    numerics: bool = False
    # sys.path[0] is the launcher's (the CLI's cwd or script folder): the program's takes its place
    replace_path0: bool = False


def rank() -> int | None:
    value = os.environ.get("RANK")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def rank_path(path: str, rank_: int | None) -> str:
    """PATH with `{rank}` filled in, or `.rankN` before the suffix when running under torchrun."""
    if "{rank}" in path:
        return path.replace("{rank}", str(rank_ if rank_ is not None else 0))
    if rank_ is None:
        return path
    root, ext = os.path.splitext(path)
    return f"{root}.rank{rank_}{ext or '.json'}"


class Terminated(BaseException):
    """SIGTERM while the program runs: unwinds it like Ctrl-C, so the report is still written."""


def _in_tool_callback(frame: Any) -> bool:
    """The signal arrived inside provenance's gc callback, where Python drops exceptions."""
    from .provenance import IN_CALLBACK

    return frame is not None and frame.f_code in IN_CALLBACK


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM raises Terminated in the program, as SIGINT raises KeyboardInterrupt (unless the program
    installed its own handlers).

    Python prints and drops an exception raised inside a gc callback; a signal that arrives in the
    tool's own (provenance asks for a sweep of dead tensors' tags there) is sent again a moment
    later instead, so the program cannot miss it and run on.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raising(exc_type: type[BaseException]) -> Callable[[int, Any], None]:
        def handler(signum: int, frame: Any) -> None:
            if _in_tool_callback(frame):
                again = threading.Timer(0.01, os.kill, (os.getpid(), signum))
                again.daemon = True
                again.start()
                return
            raise exc_type

        return handler

    installed = {signal.SIGTERM: raising(Terminated)}
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        installed[signal.SIGINT] = raising(KeyboardInterrupt)
    previous = {sig: signal.signal(sig, handler) for sig, handler in installed.items()}
    try:
        yield
    finally:
        for sig, handler in installed.items():
            if signal.getsignal(sig) is handler:
                signal.signal(sig, previous[sig])


@contextlib.contextmanager
def signals_deferred(until_exit: bool = True) -> Iterator[Callable[[], None]]:
    """SIGINT/SIGTERM wait (blocked) while the report is written, and act once it is whole.

    With `until_exit=False` they are blocked only from when the yielded function is called on.
    """
    deferrable = hasattr(signal, "pthread_sigmask") and threading.current_thread() is threading.main_thread()
    mask = {signal.SIGINT, signal.SIGTERM}
    blocked = False

    def block() -> None:
        nonlocal blocked
        if deferrable and not blocked:
            signal.pthread_sigmask(signal.SIG_BLOCK, mask)
            blocked = True

    if until_exit:
        block()
    try:
        yield block
    finally:
        if blocked:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, mask)


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # what Python does with sys.exit("message")
    return 1


def _user_traceback(exc: BaseException) -> Any:
    """The traceback Python would show for the program: without run.py and runpy frames on top
    (None when the script never ran: a SyntaxError carries file and line itself)."""
    tb = exc.__traceback__
    while tb is not None and (
        tb.tb_frame.f_code.co_filename in (__file__, runpy.__file__)
        or tb.tb_frame.f_code.co_filename.startswith("<frozen runpy")
    ):
        tb = tb.tb_next
    return tb


def _record_noted(report: Report, exc: BaseException) -> None:
    """The findings the traceback just printed on stderr shows in its notes (report.meta["noted"]):
    a console on stderr shows each of them once, not as a panel again."""
    if "torch" in sys.modules:  # no torch, no watch: no note
        from .failures import noted_in

        noted = noted_in(exc)
        if noted:
            report.meta["noted"] = noted


def _print_user_traceback(exc: BaseException) -> None:
    """What Python does with an uncaught exception: the program's own sys.excepthook if it set one."""
    tb = _user_traceback(exc)
    hook = sys.excepthook
    if hook is sys.__excepthook__ or hook is None:
        traceback.print_exception(type(exc), exc, tb)
        return
    try:
        hook(type(exc), exc, tb)
    except BaseException as err:  # as Python does: say the hook failed, then show both
        print("Error in sys.excepthook:", file=sys.stderr)
        traceback.print_exception(type(err), err, err.__traceback__)
        print("\nOriginal exception was:", file=sys.stderr)
        traceback.print_exception(type(exc), exc, tb)


def _script_file(target: str) -> str:
    """The file Python would run for `python TARGET`: the script, a directory's __main__.py, or a
    readable non-regular file such as /dev/stdin; `-` is standard input, as for `python -`."""
    if target == "-":
        return target
    if os.path.isdir(target):
        main = os.path.join(target, "__main__.py")
        if not os.path.isfile(main):
            raise DoctorError(f"{target} is a directory without a __main__.py")
        return main
    if not os.path.exists(target):
        raise DoctorError(f"no such script: {target}")
    return target


def _read_source(path: str) -> bytes:
    try:
        if path == "-":
            source = sys.stdin.buffer.read()
        else:
            with open(path, "rb") as fh:
                source = fh.read()
    except OSError as exc:
        raise DoctorError(f"cannot read {path}: {exc.strerror or exc}") from None
    if b"\0" in source[:8192]:
        raise DoctorError(f"{path} is not a Python script (binary content)")
    return source


def _main_namespace(path: str, spec: Any = None) -> dict[str, Any]:
    """__main__'s names as python makes them: `python -m` (its module's `spec`), `python DIR`
    (its __main__.py found as module `__main__`), `python -` (stdin) or `python script.py`."""
    if spec is None and os.path.basename(path) == "__main__.py" and path != "-":
        spec = importlib.util.spec_from_file_location("__main__", path)
    if spec is not None:
        loader, parent = spec.loader, spec.parent
    elif path == "<stdin>":
        loader, parent = importlib.machinery.BuiltinImporter, None
    else:
        loader, parent = importlib.machinery.SourceFileLoader("__main__", path), None
    names: dict[str, Any] = dict(
        __file__=path,
        __builtins__=builtins,  # the module, as in python's own __main__ (not its dict)
        __cached__=getattr(spec, "cached", None),
        __loader__=loader,
        __package__=parent,
        __spec__=spec,
    )
    if sys.version_info < (3, 14):  # python's __main__ starts with an empty __annotations__ until 3.14
        names["__annotations__"] = {}
    return names


def _exec_main(code: object, path: str, spec: Any = None) -> None:
    """Run compiled code as __main__, the way `python path` (or `python -m`, with its module's
    `spec`) does; unlike runpy's alter_sys, nothing is restored into sys.argv, which the program
    may have emptied."""
    module = types.ModuleType("__main__")
    module.__dict__.update(_main_namespace(path, spec))
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = module
    try:
        exec(code, module.__dict__)
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved


def _module_exists(name: str) -> bool:
    sys.path.insert(0, os.getcwd())
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
    finally:
        sys.path.pop(0)


class _WatchOnTorchImport(importlib.abc.MetaPathFinder):
    """Starts watching when the program imports torch, not before: what the program sets up first
    (OMP_NUM_THREADS, torch's environment variables) takes effect as it does under python."""

    def __init__(self, start: Callable[[], None]) -> None:
        self.start = start

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "torch":
            return None
        self.remove()
        spec = importlib.util.find_spec(name)
        loader = getattr(spec, "loader", None)
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return spec
        start = self.start

        class Loader(importlib.abc.Loader):
            def create_module(self, spec_: Any) -> Any:
                return loader.create_module(spec_)

            def exec_module(self, module: Any) -> None:
                module.__loader__ = spec.loader = loader  # torch keeps its own loader
                loader.exec_module(module)
                start()

        spec.loader = Loader()
        return spec

    def install(self) -> None:
        sys.meta_path.insert(0, self)

    def remove(self) -> None:
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)


def _exec_watched(
    opts: RunOptions, source: bytes | None, script: str | None, report: Report, ended: Callable[[int], None]
) -> None:
    """Run the program; watch from the moment torch is imported (at once when it already is).
    `ended(status)`: the program called os._exit, the watch has ended: report now."""
    from ..verifying.guard import installed
    from ..verifying.warm import prefork, program_starts

    sessions: list[Any] = []
    guard = installed()  # set: this is a re-run, under the guard

    def os_exit(status: int) -> None:
        hook.remove()
        if sessions:
            sessions[0].__exit__(None, None, None)
        ended(status)

    def start() -> None:
        from . import watch

        if guard is not None:  # a re-run under the guard: torch's C++ writer checked too
            guard.guard_torch_writers()
        session = watch(mode=opts.mode, numerics=opts.numerics, report=report)
        try:
            session.__enter__()
        except Exception as exc:  # inside the program's `import torch`: never fail the program's import
            print(f"dtype-doctor run: error: cannot start watching: {exc}", file=sys.stderr)
            return
        sessions.append(session)
        if os.environ.get(TRY_ENV):
            # a re-run of the experiment's: its intervention above the watch, which sees the ops as
            # they run (a cast the intervention skips is not a mismatch the program has)
            from ..experiment.intervene import install
            from .dtype_values import resolve

            install(resolve, (lambda: session.stack.top, session.names.module))

    program_starts()
    if guard is None:  # a re-run makes no re-runs of its own
        prefork()  # the re-runs' zygote, forked before any of the program's state exists
    hook = _WatchOnTorchImport(start)
    limit = _make_room()
    if "torch" in sys.modules:
        start()
    else:
        hook.install()
    try:
        before = set(threading.enumerate())  # `run` called in a process with threads of its own
        try:
            with reported_os_exit(os_exit):
                _exec_program(opts, source, script)
        except SystemExit:
            _await_threads(before)
            raise
        _await_threads(before)
    except BaseException as exc:
        hook.remove()
        if sessions:
            sessions[0].__exit__(type(exc), exc, exc.__traceback__)
        raise
    finally:
        if sys.getrecursionlimit() == limit[1]:  # unless the program set its own
            sys.setrecursionlimit(limit[0])
    hook.remove()
    if sessions:
        sessions[0].__exit__(None, None, None)


def _exec_program(opts: RunOptions, source: bytes | None, script: str | None) -> None:
    if opts.is_module:
        _, spec, code_obj = runpy._get_module_details(opts.target)  # what `python -m` runs
        sys.argv[0] = spec.origin
        _exec_main(code_obj, spec.origin, spec)
    elif script == "-":
        _exec_main(compile(source or b"", "<stdin>", "exec", dont_inherit=True), "<stdin>")
    else:
        path = os.path.abspath(script or "")  # python >= 3.9: __file__ and tracebacks are absolute
        # dont_inherit: this file's `from __future__ import annotations` is not the program's
        _exec_main(compile(source or b"", path, "exec", dont_inherit=True), path)


def _await_threads(before: set[threading.Thread]) -> None:
    """What python does at exit once the program's code is done (returned or sys.exit): wait for its
    non-daemon threads, so that what they do (and how they fail) is in the report. Not after an
    uncaught exception, whose traceback python shows before it waits. Only the program's own threads
    (not those alive before it started), and not a thread pool's workers: python's exit tells those to
    stop before it joins them, so they would wait here for ever."""
    me = threading.current_thread()
    while True:
        running = [
            t
            for t in threading.enumerate()
            if t is not me and t not in before and not t.daemon and t.is_alive() and not _pool_worker(t)
        ]
        if not running:
            return
        for thread in running:
            thread.join()


def _pool_worker(thread: threading.Thread) -> bool:
    from concurrent.futures import thread as pool

    return getattr(thread, "_target", None) is pool._worker


# frames the watcher adds on top of an op (mode, session, contracts): room for them at the deepest point
_WATCH_FRAMES = 40


def _make_room() -> tuple[int, int]:
    """Raise the recursion limit by the frames `run` itself stands on (python runs a script at depth 1)
    and the watcher's own: the program recurses as deep as under python. (old, new) limits."""
    depth, frame = 0, sys._getframe()
    while frame is not None:
        depth, frame = depth + 1, frame.f_back
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(old + depth + _WATCH_FRAMES)
    return old, old + depth + _WATCH_FRAMES


def run_program(opts: RunOptions, then: Callable[[int, Report], None] | None = None) -> tuple[int, Report]:
    """Run the program under watch; return (its exit code, the report).

    `then(code, report)` shows the report with SIGINT/SIGTERM held back until it is written, and only
    in the process that started the program (a child that forked and exits writes nothing).
    """
    script = source = None
    if opts.is_module:
        if not _module_exists(opts.target):
            raise DoctorError(f"no module named {opts.target}")
    else:
        script = _script_file(opts.target)
        source = _read_source(script)  # read once: /dev/stdin cannot be read twice
    report = Report(tool="run", started_ns=time.time_ns())
    r = rank()
    report.meta["program"] = " ".join([("-m " if opts.is_module else "") + opts.target, *opts.argv])
    saved_argv, saved_path, std = sys.argv[:], sys.path[:], StdStreams()
    sys.argv = [opts.target, *opts.argv]
    if opts.replace_path0 and sys.path:
        del sys.path[0]
    if opts.is_module:
        sys.path.insert(0, os.getcwd())
    elif script == "-":
        sys.path.insert(0, "")
    else:
        sys.path.insert(
            0, os.path.dirname(os.path.realpath(script)) if os.path.isfile(script) else os.getcwd()
        )  # as python: the folder of the real file, past symlinks
    pid = os.getpid()
    code = 0
    with signals_deferred(until_exit=False) as defer:

        def ended(status: int) -> None:  # os._exit(status): the report now, the process leaves after
            defer()
            std.restore()
            report.meta["ended_by"] = f"os._exit({status})"
            if then is not None:
                then(status, report if r is None else tag_rank(report, r))

        with terminate_as_interrupt():
            try:
                _exec_watched(opts, source, script, report, ended)
            except SystemExit as exc:
                code = _exit_code(exc.code)
            except Terminated:
                code = 128 + signal.SIGTERM
                report.meta["signal"] = "SIGTERM"
            except KeyboardInterrupt as exc:
                if "torch" in sys.modules:  # Ctrl-C inside the watcher: the traceback ends in the program
                    from .failures import hide_own_frames, only_own_frames

                    seen: BaseException | None = exc
                    for _ in range(100):  # and in the exceptions it was raised while handling
                        if seen is None:
                            break
                        hide_own_frames(seen)
                        if seen.__context__ is not None and only_own_frames(seen.__context__):
                            seen.__context__ = None  # the tool was handling it: python has no such context
                        seen = seen.__cause__ or seen.__context__
                _print_user_traceback(exc)  # python shows it too, then dies by SIGINT
                code = 130
                report.meta["signal"] = "SIGINT"
            except BaseException as exc:
                _print_user_traceback(exc)
                code = 1
                _record_noted(report, exc)
            finally:
                defer()  # from here on SIGINT/SIGTERM wait until the report is written
                sys.argv, sys.path[:] = saved_argv, saved_path
                std.restore()  # a stream or descriptor the program closed: the report is still written
        if r is not None:
            report = tag_rank(report, r)
        if then is not None and os.getpid() == pid:
            then(code, report)
    return code, report
