"""`--diff` / `--write` for run and check: propose the verified patch, apply it on request.

`--diff` prints the diff alone on stdout (in each file's own bytes, for `patch -p0`); the report and
the program's own output go to stderr (cli.main guards stdout), unless `--json` takes stdout.

Exit codes: 0 fixed and verified (or nothing to fix), 1 problems left, 2 usage (DoctorError).
"""

from __future__ import annotations

import argparse
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
            section.outcome += "".join(f"\nbackup of {w.path}: {w.backup}" for w in written if w.backup)
            section.outcome += "".join(
                f"\n{w.path} is marked read-only: written because this process may write it; mode kept"
                for w in written
                if w.kept_read_only
            )
        else:
            section.outcome += "\nnot written: the patch did not pass its re-run"
    report.sections.append(section)
    return 0 if section.verified else 1


def run_with_patch(opts: Any, args: argparse.Namespace, show: Any) -> int:
    """`run --diff/--write`: the program under watch, then the patch of its root causes, replayed."""
    import os
    import time

    from ..errors import DoctorError
    from ..patching import propose, run_command
    from ..watching.run import run_program

    if opts.is_module:
        raise DoctorError("--diff and --write need a script path, not -m MODULE")
    runs: list[Any] = []
    started = time.monotonic()
    code, report = run_program(opts, then=lambda code, report: runs.append(report))
    if not runs:  # a child process the program forked: the parent shows the report
        return code
    anchor = os.path.dirname(os.path.abspath(opts.target))
    options = [f"--mode={opts.mode}"] + (["--numerics"] if opts.numerics else [])
    timeout = max(120.0, 4 * (time.monotonic() - started))  # a replay that hangs is cut off
    proposal = propose(report, run_command(opts.target, opts.argv, options), anchor, timeout=timeout)
    if not report.findings and code:  # nothing of dtype-doctor's to fix, but the program failed
        proposal.section.verified = None
        proposal.section.outcome = f"no dtype problem seen; the program exited with code {code}"
    result = attach(report, proposal, args)
    show(report, code)
    print_diff(proposal, args)
    return result


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
    proposal = propose(report, check_command(path, factory, options), anchor, home=path)
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
        write_stdout_bytes(proposal.diff_bytes())
