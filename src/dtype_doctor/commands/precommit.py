"""`dtype-doctor precommit`: run `check` and `audit` on the factories `[tool.dtype-doctor]` names
(the pre-commit hook's entry; see .pre-commit-hooks.yaml)."""

from __future__ import annotations

import argparse
import importlib
import sys

from . import EXIT_FINDINGS, EXIT_OK, exit_status

HELP = "run check/audit on the factories pyproject.toml's [tool.dtype-doctor] names (pre-commit)"
DESCRIPTION = (
    "Read [tool.dtype-doctor] from the nearest pyproject.toml and run `check` for each entry of its "
    '`check` list and `audit` for each of its `audit` list (each entry: target = "PATH:FACTORY" and '
    'the command\'s options by name, e.g. input = ["2x16:float16"], dtype = "float16"). Exit 1 when any '
    "of them fails (by the config's fail-on, else the command's own rule)."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "files", nargs="*", help="ignored: the files pre-commit passes (the config names the factories)"
    )


def run(args: argparse.Namespace) -> int:
    from ..errors import DoctorError
    from ._config import apply, find, jobs

    found = find()
    todo = jobs(found)
    if not todo:
        where = found[0] if found else "no pyproject.toml with [tool.dtype-doctor] above this folder"
        raise DoctorError(f"nothing to run: {where} names no check or audit entry")
    worst = EXIT_OK
    for command, argv in todo:
        module = importlib.import_module(f".{command}", __package__)
        parser = argparse.ArgumentParser(prog=f"dtype-doctor {command}", exit_on_error=False)
        module.add_arguments(parser)
        apply(parser, found)
        try:
            job = parser.parse_args(argv)
        except (argparse.ArgumentError, SystemExit) as exc:
            raise DoctorError(f"{found[0]}: {command} {' '.join(argv)}: {exc}") from None
        print(f"dtype-doctor precommit: {command} {' '.join(argv)}", file=sys.stderr)
        code = exit_status(module.run(job), getattr(job, "shown_report", None), job.fail_on)
        worst = max(worst, code)
    return EXIT_FINDINGS if worst == EXIT_FINDINGS else worst
