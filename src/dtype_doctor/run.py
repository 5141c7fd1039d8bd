"""`dtype-doctor run script.py args...`: run a program as __main__ under `watch`.

The program sees its own sys.argv and keeps its exit code; its exceptions keep their
traceback, with the diagnosis added as notes. The report goes to stderr (and --json).
Under torchrun each rank writes its own report (RANK env).
"""

from __future__ import annotations

import importlib.util
import os
import runpy
import sys
import traceback
from dataclasses import dataclass

from .errors import DoctorError
from .report import Report


@dataclass
class RunOptions:
    target: str
    argv: list[str]
    is_module: bool = False
    mode: str = "observe"
    numerics: bool = False


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


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # what Python does with sys.exit("message")
    return 1


def _print_user_traceback(exc: BaseException) -> None:
    """The traceback Python would print for the program: without run.py and runpy frames on top."""
    tb = exc.__traceback__
    while tb is not None and (
        tb.tb_frame.f_code.co_filename in (__file__, runpy.__file__)
        or tb.tb_frame.f_code.co_filename.startswith("<frozen runpy")
    ):
        tb = tb.tb_next
    # tb is None when the script never ran (a SyntaxError): its message carries file and line itself
    traceback.print_exception(type(exc), exc, tb)


def _is_binary(path: str) -> bool:
    with open(path, "rb") as fh:
        return b"\0" in fh.read(8192)


def _module_exists(name: str) -> bool:
    sys.path.insert(0, os.getcwd())
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
    finally:
        sys.path.pop(0)


def run_program(opts: RunOptions) -> tuple[int, Report]:
    """Run the program under watch; return (its exit code, the report)."""
    from .watch import watch

    if not opts.is_module and not os.path.isfile(opts.target):
        raise DoctorError(f"no such script: {opts.target}")
    if not opts.is_module and _is_binary(opts.target):
        raise DoctorError(f"{opts.target} is not a Python script (binary content)")
    if opts.is_module and not _module_exists(opts.target):
        raise DoctorError(f"no module named {opts.target}")
    if opts.numerics and importlib.util.find_spec("dtype_doctor.numerics") is None:
        raise DoctorError("--numerics: numerics monitoring is not available in this build")
    report = Report(tool="run")
    r = rank()
    if r is not None:
        report.meta["rank"] = r
    report.meta["program"] = " ".join([("-m " if opts.is_module else "") + opts.target, *opts.argv])
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [opts.target, *opts.argv]
    sys.path.insert(0, os.getcwd() if opts.is_module else os.path.dirname(os.path.abspath(opts.target)))
    code = 0
    try:
        with watch(mode=opts.mode, numerics=opts.numerics, report=report):
            if opts.is_module:
                runpy.run_module(opts.target, run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(opts.target, run_name="__main__")
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except KeyboardInterrupt:
        code = 130
    except BaseException as exc:
        _print_user_traceback(exc)
        code = 1
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    if r is not None:
        for f in report.findings:
            if f.location is not None:
                f.location.rank = r
    return code, report
