"""`--diff` / `--write` for run and check: propose the verified patch, apply it on request.

`--diff` prints the diff alone on stdout (in each file's own bytes, for `patch -p0`); the report and
the program's own output go to stderr (cli.main guards stdout), unless `--json` takes stdout.

Exit codes: 0 fixed and verified (or nothing to fix), 1 problems left, 2 usage (DoctorError).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any


def add_patch_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("patch")
    group.add_argument(
        "--diff",
        action="store_true",
        help="turn each root cause into an edit of your own files, re-run the patched copy to verify "
        "it, and print the unified diff (exit 0: fixed and verified, 1: problems left)",
    )
    group.add_argument(
        "--write", action="store_true", help="like --diff, then apply the verified diff to the files"
    )
    group.add_argument("--no-backup", action="store_true", help="with --write: leave no FILE.orig")
    group.add_argument(
        "--force",
        action="store_true",
        help="with --write: write a file with uncommitted git changes, or a read-only one",
    )


def wants_patch(args: argparse.Namespace) -> bool:
    from ..errors import DoctorError

    if (getattr(args, "no_backup", False) or getattr(args, "force", False)) and not getattr(
        args, "write", False
    ):
        raise DoctorError("--no-backup and --force go with --write")
    return bool(getattr(args, "diff", False) or getattr(args, "write", False))


def attach(report: Any, proposal: Any, args: argparse.Namespace) -> int:
    """Put the patch section on the report, write the files when asked; the exit code."""
    import shlex

    from ..errors import DoctorError
    from ..patching.write import write_files

    section = proposal.section
    if args.write and proposal.files:
        if section.verified:
            backup = not args.no_backup
            try:
                written = write_files(proposal.originals, proposal.files, backup=backup, force=args.force)
            except DoctorError as exc:
                section.outcome += f"\nnot written: {exc}"
                report.sections.append(section)
                return 1
            section.written = [w.path for w in written]
            section.outcome += "".join(
                f"\nbackup of {w.path}: {w.backup}"
                if w.backup
                else f"\n{w.path}: no backup, git has it (git checkout -- {shlex.quote(w.path)} undoes the write)"
                if backup
                else ""
                for w in written
            )
            section.outcome += "".join(
                f"\n{w.path} is marked read-only: written because this process may write it; mode kept"
                for w in written
                if w.kept_read_only
            )
        else:
            section.outcome += "\nnot written: the patch did not pass its re-run"
    report.sections.append(section)
    return 0 if section.verified else 1


def rerun_progress(args: argparse.Namespace, command: str) -> Callable[[int, int], None] | None:
    """One line per candidate re-run (`dtype-doctor run --diff: 2/3 patched copy: re-running`) on a
    stderr that is no terminal (a CI log: the re-runs take a while in silence); none with --quiet."""
    import sys

    if getattr(args, "quiet", False) or sys.stderr.isatty():
        return None
    from ..comparing.progress import ProgressEvent, line_progress

    flag = (
        "--write"
        if getattr(args, "write", False)
        else "--diff"
        if getattr(args, "diff", False)
        else "experiment"
    )
    show = line_progress(sys.stderr, every=0.0, label=f"{command} {flag}")
    return lambda done, total: show(ProgressEvent(done, total, "patched copy", "re-running"))


DEFAULT_BUDGET_FACTOR = 3.0  # the experiment's default budget: this many times the failing run...
MIN_BUDGET = 60.0  # ...and never less than this (a re-run pays an interpreter and torch's import)
PATCH_BUDGET = 240.0  # the least the line experiment gets when --diff/--write asked for a fix


BUDGET_ENV = "DTYPE_DOCTOR_BUDGET"  # the default of --budget (0: no experiment unless asked)


def budget_seconds(args: argparse.Namespace, elapsed: float) -> float:
    """How long the experiment may take: `--budget`, else $DTYPE_DOCTOR_BUDGET, else a few times
    the run it diagnoses."""
    import os

    from ..errors import DoctorError

    given = getattr(args, "budget", None)
    if given is None and os.environ.get(BUDGET_ENV, "").strip():
        try:
            given = float(os.environ[BUDGET_ENV])
        except ValueError:
            raise DoctorError(f"{BUDGET_ENV}={os.environ[BUDGET_ENV]!r} is not a number of seconds") from None
    if given is not None:
        if given != given or given < 0:
            raise DoctorError(f"the experiment's budget must be 0 or more seconds, not {given}")
        return float(given)
    return max(MIN_BUDGET, DEFAULT_BUDGET_FACTOR * elapsed)


def run_with_experiment(opts: Any, args: argparse.Namespace, show: Any) -> int:
    """`run`: the program under watch; when it reports an error or a warning in a script of the user's,
    the experiment: each root cause's candidate edits re-run in an isolated scratch copy until one
    cures the program, within the budget. The cure is the first fix of every error and warning
    finding (editing its edits is what `--diff` prints and `--write` writes)."""
    import os
    import time

    from ..errors import DoctorError
    from ..patching import propose, run_command
    from ..watching.run import run_program

    patch = wants_patch(args)
    budget_seconds(args, 0.0)  # a bad budget is refused before the program runs
    if opts.is_module and patch:
        raise DoctorError("--diff and --write need a script path, not -m MODULE")
    started = time.monotonic()
    ran: dict[str, Any] = {}  # set in the process that started the program (a forked child sets none)

    def then(code: int, report: Any) -> None:
        ran["elapsed"] = elapsed = time.monotonic() - started
        ran["budget"] = budget = budget_seconds(args, elapsed)
        ended = report.meta.get("ended_by")  # os._exit: the process leaves once shown, nothing is tried
        ran["shown"] = bool(ended) or (
            not patch and not (budget > 0 and _worth_an_experiment(opts, report, code))
        )
        if ran["shown"]:
            show(report, code)  # nothing to try: shown at once, with SIGINT/SIGTERM held back

    code, report = run_program(opts, then=then)
    if not ran or ran["shown"]:  # a child the program forked (its parent shows it), or shown already
        return code
    elapsed, budget = ran["elapsed"], ran["budget"]
    anchor = os.path.dirname(os.path.abspath(opts.target))
    options = [f"--mode={opts.mode}", "--budget=0"] + (["--numerics"] if opts.numerics else [])
    timeout = max(120.0, 4 * elapsed)  # a replay that hangs is cut off
    command = run_command(opts.target, opts.argv, options)
    t0 = time.monotonic()
    proposal = propose(
        report,
        command,
        anchor,
        timeout=timeout,
        on_progress=rerun_progress(args, "run"),
        deadline=None if patch else t0 + budget,
        since_ns=report.started_ns,
    )
    cure_first(report, proposal, time.monotonic() - t0)
    if code and report.meta.get("raised") and not (proposal.tried and proposal.section.verified):
        # --diff/--write asked for a fix: the line experiment gets at least PATCH_BUDGET
        until = t0 + (max(budget, PATCH_BUDGET) if patch else budget)
        _line_experiment(report, proposal, command, anchor, until, timeout, code, patch)
    if not report.findings and code:  # nothing of dtype-doctor's to fix, but the program failed
        proposal.section.verified = None
        proposal.section.outcome = f"no dtype problem seen; the program exited with code {code}"
    if not patch:
        show(report, code)
        return code
    result = attach(report, proposal, args)
    show(report, code)
    print_diff(proposal, args)
    return result


def _line_experiment(
    report: Any,
    proposal: Any,
    command: Any,
    anchor: str,
    deadline: float,
    timeout: float,
    code: int,
    patch: bool,
) -> None:
    """The program failed and no edit planned from the findings cured it: the line experiment
    (experiment/lines.py) looks for the line of the user's whose float32 computation does. Its root
    goes first in the report; under --diff/--write its edit is the patch."""
    import os
    import time

    from ..editing.fix_edits import apply_json, by_file
    from ..experiment import lines
    from ..patching.plan import Planner
    from ..report import Severity

    t0 = time.monotonic()
    if deadline - t0 < 5:
        return
    planner = Planner(since_ns=report.started_ns)
    # the dtype error the program died of: the experiment's root is that error's
    raised = next((f.code for f in report.findings if f.severity == Severity.ERROR), "")
    found, outcome = lines.diagnose(command, anchor, deadline, timeout, code, planner.source, raised)
    meta = report.meta.setdefault("experiment", {"tried": 0, "cured": False, "seconds": 0.0, "changes": []})
    meta["tried"] = meta.get("tried", 0) + outcome.runs
    meta["seconds"] = round(meta.get("seconds", 0.0) + time.monotonic() - t0, 1)
    if found is None:
        meta["outcome"] = (meta.get("outcome") or "") + (f"; lines: {outcome.why}" if outcome.why else "")
        return
    report.findings.insert(0, found)  # only a root whose edit the re-run verified
    fix = found.fixes[0]
    meta["cured"] = True
    meta["changes"] = [fix.title]
    meta["outcome"] = fix.verification.removeprefix("verified: these edits, re-run: ")
    if patch:  # the patch is the line's edit
        originals, files, encodings = {}, {}, {}
        for path, edits in by_file(fix.edits).items():
            src = planner.source(path) or planner.source(os.path.relpath(path))
            if src is None:
                return
            originals[src.path], encodings[src.path] = src.text, src.encoding
            files[src.path] = apply_json(src.text, edits)
        from ..editing.source import unified_diff

        proposal.originals, proposal.files, proposal.encodings = originals, files, encodings
        proposal.edits = list(fix.edits)
        proposal.section.diff = "".join(unified_diff(p, originals[p], files[p], encodings[p]) for p in files)
        proposal.section.files = list(files)
        proposal.section.changes = [{"cause": found.title, "change": fix.title}]
        proposal.section.verified = True
        proposal.section.outcome = f"re-run of the patched copy: {meta['outcome']}"


def _worth_an_experiment(opts: Any, report: Any, code: int) -> bool:
    """A script file of the user's whose run reported an error or a warning, or died of an exception
    while torch was watched."""
    import os

    from ..report import Severity

    if opts.is_module or opts.target == "-" or not os.path.isfile(opts.target):
        return False
    if report.meta.get("signal"):  # stopped by Ctrl-C or SIGTERM: the user wants it to stop, not re-run
        return False
    if code and report.meta.get("raised"):
        return True
    return any(f.severity in (Severity.ERROR, Severity.WARNING) for f in report.findings)


def cure_first(report: Any, proposal: Any, seconds: float) -> None:
    """The experiment's outcome on the report: `meta["experiment"]` (what was tried, what cured, how
    long), and a cure as the first fix of every error and warning finding, its edits those the
    re-run ran."""
    from ..report import Severity

    section = proposal.section
    tried = proposal.tried
    report.meta["experiment"] = {
        "tried": tried,
        "cured": bool(tried and section.verified),
        "seconds": round(seconds, 1),
        "changes": [c["change"] for c in section.changes],
        "outcome": section.outcome.splitlines()[0] if section.outcome else "",
    }
    if not (section.verified and proposal.edits):
        return
    title = "; ".join(c["change"] for c in section.changes) or "the edit the re-run cured"
    what = section.outcome.splitlines()[0].removeprefix("re-run of the patched copy: ")
    from ..editing.fix_edits import small_diff
    from ..remedies import cure as make_cure

    cure = make_cure(
        title,
        f"the experiment's cure: of {tried} edit set{'s' if tried != 1 else ''} tried, the first whose "
        "re-run of your program passed",
        list(proposal.edits),
        small_diff(proposal.edits),
        True,
        f"verified: these edits, re-run: {what}",
    )
    for f in report.findings:
        if f.severity in (Severity.ERROR, Severity.WARNING):
            f.fixes.insert(0, cure)


def check_with_patch(report: Any, args: argparse.Namespace) -> int:
    """`check FILE.py:FACTORY --diff/--write`: the patch of the factory's source, replayed by check."""
    import os

    from ..errors import DoctorError
    from ..patching import check_command, propose

    path, _, factory = (args.target or "").rpartition(":")
    if not (path.endswith(".py") and os.path.isfile(path) and factory):
        raise DoctorError("--diff and --write need a FILE.py:FACTORY target (a file of yours to edit)")
    options = [f"--input={text}" for text in args.input]
    options += [f"--keep-fp32={p}" for p in args.keep_fp32]
    options += [f"--{k}={v}" for k, v in (("dtype", args.dtype), ("autocast", args.autocast)) if v]
    anchor = os.path.dirname(os.path.abspath(path))
    command = check_command(path, factory, options)
    proposal = propose(report, command, anchor, home=path, on_progress=rerun_progress(args, "check"))
    result = attach(report, proposal, args)
    print_diff(proposal, args)
    return result


def diff_on_stdout(args: argparse.Namespace) -> bool:
    """`--diff` (not `--write`) without a machine output on stdout: stdout carries the diff alone."""
    from ._output import stdout_taken

    diff = getattr(args, "diff", False) and not getattr(args, "write", False)
    return bool(diff) and not stdout_taken(args)


def print_diff(proposal: Any, args: argparse.Namespace) -> None:
    """The proposed diff, byte-exact, on the real stdout (nothing when no change is proposed, nor
    when stdout is the terminal the report on stderr showed the diff on already)."""
    from ._output import real_stdout_is_stderrs_terminal, write_stdout_bytes

    if diff_on_stdout(args) and proposal.files and not real_stdout_is_stderrs_terminal():
        try:
            write_stdout_bytes(proposal.diff_bytes())
        except BrokenPipeError:  # the reader left (`| head -1`): the output ends, the exit status stands
            from ..render.outputs import reader_gone

            reader_gone(_output_stream())


def _output_stream() -> Any:
    """The stream the diff went to: the real stdout json_stdout_guard saved, else sys.stdout."""
    import sys

    from . import _output

    return _output._json_stdout[-1] if _output._json_stdout else sys.stdout
