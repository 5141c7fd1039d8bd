"""dtype-doctor run: run a script or module under watch."""

from __future__ import annotations

import argparse

HELP = "run a script (or -m module) and locate every dtype mismatch live"
DESCRIPTION = (
    "Run a Python program as __main__ with its own arguments under dtype-doctor watch. "
    "Options for dtype-doctor come before the script; everything after it goes to the script. "
    "The exit code is the script's own."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ._output import add_output_options
    from ._patch import add_patch_options

    parser.add_argument(
        "--mode",
        choices=("observe", "strict", "fix"),
        default="observe",
        help="observe: change nothing (default); strict: stop at the first mismatch, silent "
        "promotions included; fix: cast the odd operand, record it, go on",
    )
    parser.add_argument(
        "--numerics",
        action="store_true",
        help="also monitor overflow/underflow/NaN: each module output's range every step (one "
        "fused min/max, read once per step); underflow counts on the first step and one in 100; "
        "a float32 re-run of the first low-precision step; op scans only after a finding",
    )
    parser.add_argument(
        "-m",
        dest="module",
        nargs=argparse.REMAINDER,
        metavar="MODULE ...",
        help="run a library module as a script, like python -m (its arguments follow)",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=None,
        metavar="SECONDS",
        help="how long the experiment may re-run your program with candidate edits to find the one "
        "that cures it (default: 3x the run, at least 60 s; 0: no experiment)",
    )
    add_output_options(parser)
    add_patch_options(parser)
    parser.add_argument("script", nargs="?", help="the Python script to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")


def run(args: argparse.Namespace) -> int:
    from ..errors import DoctorError
    from ..watching.run import RunOptions, rank
    from ._patch import run_with_experiment

    if args.module:
        opts = RunOptions(args.module[0], list(args.module[1:]), is_module=True)
    elif args.script:
        opts = RunOptions(args.script, list(args.args))
    else:
        raise DoctorError("nothing to run: give a script path or -m MODULE")
    opts.mode, opts.numerics, opts.replace_path0 = args.mode, args.numerics, True
    return run_with_experiment(opts, args, lambda report, code: _emit(report, args, rank(), code))


def _emit(report, args: argparse.Namespace, rank_: int | None, code: int = 0) -> None:
    from ..render.console import make_console
    from ..watching.run import rank_path
    from ._output import emit

    stopped_by = {"SIGINT": "Ctrl-C (SIGINT)", "SIGTERM": "SIGTERM"}.get(report.meta.get("signal", ""))
    if stopped_by:  # the report is whole, but of the run up to the signal: say so
        report.meta["interrupted"] = stopped_by
    emit(
        report,
        args,
        console=make_console(color=not args.no_color, stderr=True),
        path=lambda p: rank_path(p, rank_),
        # "no problems found" would read as if the crash were fine
        empty=_empty_line(stopped_by, report.meta.get("ended_by"), code),
    )


def _empty_line(stopped_by: str | None, ended_by: str | None, code: int) -> str | None:
    """What a run without findings says, when the program did not simply end well."""
    if stopped_by:
        return f"dtype-doctor run: interrupted by {stopped_by}; no mixed-precision problem seen up to then."
    if ended_by:
        return f"dtype-doctor run: the program ended by {ended_by}; no mixed-precision problem seen."
    if code:
        return f"dtype-doctor run: the program exited with code {code}; no mixed-precision problem seen."
    return None
