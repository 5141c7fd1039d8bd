"""The patched-program re-run back-end of the verifier (verifying/verifier.py).

The script's folder (or, when it is big, the Python files at its top) is copied to a scratch directory and the
patched files are written over their copies, in their own encodings; the program runs the scratch copy
of the script (so its sibling imports find the patched copies) with the same arguments, as a fresh
`dtype-doctor` process under watch, isolated by verifying/rerun.py (scratch working directory, no
standard input, the guard). The verifier judges what it saw (`Replay.outcome`): a patch passes
when the program exits 0, watch reports no error (and fewer warnings, where there were only
warnings) and the error vs fp32 it measured is within the threshold; a crashed re-run fails with
its exit code and last words; a patch that changes no code is never run. No torch import.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..editing.fix_edits import shown_path
from ..report import Report, Severity
from ..verifying import rerun, verifier
from ..verifying.contract import THRESHOLD, Verdict
from ..verifying.verifier import Outcome

# when the re-run's report says nothing: its own measure is watching/fp32_error.py
NOT_MEASURED = "not measured (the re-run reported nothing to compare)"
REPORT_NAME = ".dtype-doctor-replay.json"
ERROR_ENV = "DTYPE_DOCTOR_ERROR_VS_FP32"  # = watching.fp32_error.ENV (no torch import here)
# the script's folder is copied whole (data files read relative to __file__ keep working) when small
COPY_LIMIT_BYTES, COPY_LIMIT_FILES = 64 << 20, 2000
_SKIP_DIRS = {
    ".git",
    ".hg",
    ".svn",
    "__pycache__",
    ".venv",
    "venv",
    "node_modules",
    ".mypy_cache",
    ".ruff_cache",
}


@dataclass
class Replay:
    """What one re-run of a patched copy saw, and the verifier's verdict on it (set by `attempt`)."""

    code: int
    errors: int
    warnings: int
    tail: str = ""  # the end of what the program wrote, when it failed
    stopped: str = ""  # stopped by the guard or the clock: why (verifying/guard.py)
    warnings_before: int = 0  # a run with warnings only: the patch must leave fewer
    left: tuple[str, ...] = ()  # the family codes of the error/warning findings the re-run reported
    causes: frozenset[str] = frozenset()  # the codes of the run's own error/warning findings
    error_vs_fp32: str = ""  # what the re-run measured (watching/fp32_error.py), or why not
    error: float | None = None  # the same, as a number, when it was measured
    verdict: Verdict | None = None
    collected: Any = None  # what the caller's `collect` read from the scratch copy after the re-run
    report: Report | None = None  # the re-run's own report, its places in the user's files (`scratch_to_user`)

    def outcome(self) -> Outcome:
        """What the verifier judges: a crash fails with its exit code and last words, errors or
        warnings left fail, a clean run is measured against fp32."""
        if self.stopped:
            return Outcome(stopped=self.stopped)
        errs = f"{self.errors} dtype error{'s' if self.errors != 1 else ''} left"
        if self.code:
            last = self.tail.strip().splitlines()[-1:] if self.tail.strip() else []
            said = f" ({last[0].strip()[:160]})" if last else ""
            return Outcome(failed=f"exit {self.code}{', ' + errs if self.errors else ''}{said}")
        if self.errors:
            return Outcome(failed=f"exit 0, but {errs}")
        if self.warnings_before and self.warnings >= self.warnings_before:
            return Outcome(failed=f"exit 0, but the {self.warnings} warning(s) remain")
        same = sorted({c for c in self.left if c in self.causes})
        if same:  # the cause it was to fix still reported: not fixed, whatever else improved
            return Outcome(failed=f"exit 0, but still reported: {', '.join(same)}")
        if self.error is not None:
            return Outcome(error=self.error)
        return Outcome(unmeasured=f"exit 0, no dtype error; error vs fp32: {self.measured}")

    @property
    def passed(self) -> bool:
        return (self.verdict or verifier.judge(self.outcome())).passes is True

    @property
    def measured(self) -> str:
        return self.error_vs_fp32 or NOT_MEASURED

    def score(self) -> tuple:
        return (self.passed, -self.errors, self.code == 0, -self.warnings)

    def describe(self) -> str:
        """The line the patch section shows: what the clean re-run measured, else the verdict."""
        if self.passed:
            left = (
                f"; {self.warnings} warning{'s' if self.warnings != 1 else ''} left" if self.warnings else ""
            )
            within = f", within the threshold {THRESHOLD:.0e}" if self.error is not None else ""
            return f"re-run of the patched copy: exit 0, no dtype error{left}; error vs fp32: {self.measured}{within}"
        return f"re-run of the patched copy: {(self.verdict or verifier.judge(self.outcome())).text}"


@dataclass
class Patched:
    """The re-run back-end (verifier.Backend): a candidate is the patched files (path -> text);
    `originals` their text at the run; `rerun` runs the patched copy (`replay`, bound to a command)."""

    originals: dict[str, str]
    rerun: Callable[[dict[str, str]], Replay]
    last: Replay | None = None

    def edits(self, files: dict[str, str]) -> list[tuple[str, str]]:
        return [(self.originals.get(path, ""), text) for path, text in files.items()]

    def refuse(self, files: dict[str, str]) -> str | None:
        return None

    def run(self, files: dict[str, str]) -> Outcome:
        self.last = self.rerun(files)
        return self.last.outcome()


def attempt(files: dict[str, str], backend: Patched) -> Replay:
    """The patched files through the verifier: what the re-run saw (nothing, when it was never run)
    with the verdict."""
    backend.last = None
    verdict = verifier.verify(files, backend)
    seen = backend.last or Replay(code=0, errors=0, warnings=0)
    seen.verdict = verdict
    return seen


# (scratch dir, {original path: scratch path}) -> the command line to run there
Command = Callable[[str, dict[str, str]], list[str]]


def run_command(script: str, argv: Sequence[str], options: Sequence[str] = ()) -> Command:
    """`dtype-doctor run --json=REPORT OPTIONS SCRIPT ARGV` on the scratch copy of SCRIPT."""

    def build(scratch: str, placed: dict[str, str]) -> list[str]:
        target = _placed_target(script, placed)
        report = os.path.join(scratch, REPORT_NAME)
        return [sys.executable, "-m", "dtype_doctor", "run", f"--json={report}", *options, target, *argv]

    return build


def _placed_target(script: str, placed: dict[str, str]) -> str:
    """What the re-run runs: the script's copy; for `python DIR` (a folder with __main__.py) the
    folder in the copy that holds its __main__.py's copy (never the user's own folder)."""
    real = os.path.abspath(script)
    if os.path.isdir(real):
        main = placed.get(os.path.join(real, "__main__.py"))
        return os.path.dirname(main) if main is not None else real
    return placed.get(real, real)


def check_command(path: str, factory: str, options: Sequence[str]) -> Command:
    """`dtype-doctor check --json=REPORT COPY:FACTORY OPTIONS` on the scratch copy of the factory's file."""

    def build(scratch: str, placed: dict[str, str]) -> list[str]:
        target = f"{placed.get(os.path.abspath(path), os.path.abspath(path))}:{factory}"
        report = os.path.join(scratch, REPORT_NAME)
        return [sys.executable, "-m", "dtype_doctor", "check", f"--json={report}", target, *options]

    return build


def replay(
    files: dict[str, str],
    command: Command,
    anchor: str,
    timeout: float | None = None,
    encodings: dict[str, str] | None = None,
    extra_env: dict[str, str] | None = None,
    collect: Callable[[str], Any] | None = None,
) -> Replay:
    """Write `files` (path -> patched text, in `encodings[path]`, else UTF-8) to a scratch copy and run
    `command` there.

    `anchor`: the directory the scratch copy mirrors (the script's); files outside it keep their
    absolute layout under the scratch directory, and their directories go first on PYTHONPATH.
    """
    scratch = tempfile.mkdtemp(prefix="dtype-doctor-replay-")
    try:
        anchor = os.path.abspath(anchor)
        placed = _copy_small_tree(anchor, scratch, list(files))
        extra: list[str] = []
        for path, text in files.items():
            real = os.path.abspath(path)
            rel = os.path.relpath(real, anchor)
            if rel.startswith(os.pardir):
                rel = os.path.join("_abs", real.lstrip(os.sep))
                extra.append(os.path.dirname(os.path.join(scratch, rel)))
            dest = os.path.join(scratch, rel)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with open(dest, "wb") as fh:
                fh.write(text.encode((encodings or {}).get(path, "utf-8")))
            placed[real] = dest
        env = dict(os.environ)
        env[ERROR_ENV] = "1"  # the re-run measures its model's error vs fp32 (watching/fp32_error.py)
        env.update(extra_env or {})
        here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        user = rerun.pythonpath(env.get("PYTHONPATH", ""), scratch, anchor)  # its cwd is not the user's
        env["PYTHONPATH"] = os.pathsep.join([*extra, scratch, anchor, here, *user])
        ran = rerun.run(command(scratch, placed), scratch, anchor, env, timeout)
        if ran.code == 124 and not ran.stdout:
            return Replay(
                code=124, errors=0, warnings=0, stopped=f"the re-run did not finish in {timeout:.0f} s"
            )
        back = scratch_to_user(scratch, rerun.workdir(scratch, anchor), anchor)
        seen = _result(ran, os.path.join(scratch, REPORT_NAME), back)
        if collect is not None:
            seen.collected = collect(scratch)
        return seen
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _copy_small_tree(anchor: str, scratch: str, patched: Sequence[str] = ()) -> dict[str, str]:
    """Copy `anchor` into `scratch` when it holds at most COPY_LIMIT_FILES files / COPY_LIMIT_BYTES,
    else the Python files at its top (the script and the modules next to it) and those of each
    package a `patched` file lies in (the copy's package must hold the patched module: a package
    of the original next to it would be imported instead); {original: copy}."""
    files = _tree_files(anchor)
    if files is None:  # too big: walking it again for .py files could take long
        with os.scandir(anchor) as entries:
            files = [e.path for e in entries if e.name.endswith(".py") and e.is_file(follow_symlinks=False)]
        for package in _top_packages(anchor, patched):
            files += _tree_files(package, suffix=".py") or []
    placed: dict[str, str] = {}
    for path in files:
        dest = os.path.join(scratch, os.path.relpath(path, anchor))
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        try:
            shutil.copy2(path, dest)
        except OSError:
            continue
        placed[path] = dest
    return placed


def _top_packages(anchor: str, patched: Sequence[str]) -> list[str]:
    """The folders right under `anchor` that hold a `patched` file (deeper down)."""
    tops = []
    for path in patched:
        rel = os.path.relpath(os.path.abspath(path), anchor)
        parts = rel.split(os.sep)
        if len(parts) > 1 and parts[0] != os.pardir and parts[0] not in _SKIP_DIRS:
            tops.append(os.path.join(anchor, parts[0]))
    return list(dict.fromkeys(tops))


def _tree_files(anchor: str, suffix: str = "") -> list[str] | None:
    """The regular files under `anchor` (ending in `suffix`); None past COPY_LIMIT_FILES /
    COPY_LIMIT_BYTES."""
    files: list[str] = []
    size = 0
    for root, dirs, names in os.walk(anchor):
        dirs[:] = [d for d in dirs if d not in _SKIP_DIRS and not os.path.islink(os.path.join(root, d))]
        for name in names:
            path = os.path.join(root, name)
            if not name.endswith(suffix) or not os.path.isfile(path) or os.path.islink(path):
                continue
            files.append(path)
            size += os.path.getsize(path)
            if len(files) > COPY_LIMIT_FILES or size > COPY_LIMIT_BYTES:
                return None
    return files


# the fields of a report's JSON that hold a file's path
_PLACE_KEYS = frozenset({"file", "filename", "source"})


def scratch_to_user(scratch: str, workdir: str, anchor: str) -> Callable[[str], str]:
    """A path the re-run named (absolute in `scratch`, or relative to its working directory
    `workdir`) as the user names the file it copies: the same file's path in `anchor` (outside it,
    its absolute path), relative to the working directory when under it. Other paths are kept."""

    def back(path: str) -> str:
        full = os.path.normpath(os.path.join(workdir, path))
        if not full.startswith(scratch + os.sep) or not os.path.exists(full):
            return path
        rel = os.path.relpath(full, scratch)
        head, _, rest = rel.partition(os.sep)
        real = os.sep + rest if head == "_abs" else os.path.join(anchor, rel)
        return shown_path(real)

    return back


def _mapped(data: Any, back: Callable[[str], str]) -> Any:
    if isinstance(data, dict):
        return {
            k: back(v) if k in _PLACE_KEYS and isinstance(v, str) else _mapped(v, back)
            for k, v in data.items()
        }
    if isinstance(data, list):
        return [_mapped(v, back) for v in data]
    return data


def _result(proc: rerun.Ran, report_path: str, back: Callable[[str], str] = str) -> Replay:
    errors = warnings = 0
    measured, error, left = "", None, ()
    report = None
    try:
        with open(report_path, encoding="utf-8") as fh:
            report = Report.from_dict(_mapped(json.load(fh), back))
        errors = sum(1 for f in report.findings if f.severity == Severity.ERROR)
        warnings = sum(1 for f in report.findings if f.severity == Severity.WARNING)
        left = tuple(f.code for f in report.findings if f.severity in (Severity.ERROR, Severity.WARNING))
        measured = str(report.meta.get("error_vs_fp32") or "")
        value = report.meta.get("error_vs_fp32_value")
        error = float(value) if isinstance(value, (int, float)) else None
    except (OSError, ValueError, TypeError, KeyError):  # it crashed before its report: the exit code says it
        report = None
    tail = "\n".join(program_output(proc.stderr or "")[-6:]) if proc.code else ""
    return Replay(
        proc.code,
        errors,
        warnings,
        tail,
        error_vs_fp32=measured,
        stopped=proc.stopped or "",
        error=error,
        left=left,
        report=report,
    )


# where the re-run's own report starts in its stderr: its exception note, its summary, its first box
_REPORT_STARTS = ("dtype-doctor ", "╭─")


def program_output(stderr: str) -> list[str]:
    """The lines the patched program wrote, without the re-run's own report after them (its "no
    mixed-precision problem seen" is not the user's run's, and must not read as its last word)."""
    lines = stderr.strip().splitlines()
    end = next((i for i, line in enumerate(lines) if line.startswith(_REPORT_STARTS)), len(lines))
    return [line for line in lines[:end] if line.strip()]
