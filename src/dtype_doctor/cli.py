"""Thin command line: arguments → API → renderer."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import os
import sys
from collections.abc import Sequence

from .commands import EXIT_FINDINGS, EXIT_NOTHING, EXIT_OK, EXIT_USAGE  # noqa: F401 (the codes, for callers of cli)
from .commands.parser import build_parser
from .errors import DoctorError


def json_value_guard(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """Keep `--json` from swallowing the next argument unless that is a report path.

    `--json` takes an optional PATH, so `explain --json "mat1 and mat2 ..."` or `run --json train.py`
    would read the text or the script as the PATH. The next token counts as the PATH only when it
    ends in `.json` (any name works as `--json=PATH`); otherwise `-` (stdout) is made explicit.
    `merge` reads .json reports, so there `--json PATH` never takes the next token (`--json=PATH`, `-o`).
    Scanning stops where `run` hands the rest of the line to the user's script.
    """
    sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    out: list[str] = []
    command: argparse.ArgumentParser | None = None
    takes_value: set[str] = set()
    i = 0
    while i < len(argv):
        tok = argv[i]
        out.append(tok)
        if command is None:
            if sub is not None and tok in sub.choices:
                command = sub.choices[tok]
                takes_value = {
                    s
                    for a in command._actions
                    if a.option_strings and a.nargs in (None, 1)
                    for s in a.option_strings
                }
        elif tok == "--json":
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            reads_json = getattr(command, "prog", "").endswith(" merge")  # its inputs end in .json
            if (
                nxt is not None
                and (nxt == "-" or not nxt.startswith("-"))
                and (reads_json or not nxt.lower().endswith(".json"))
            ):
                out.append("-")
        elif tok in takes_value and i + 1 < len(argv):
            out.append(argv[i + 1])
            i += 1
        elif (tok == "-" or not tok.startswith("-")) and getattr(command, "prog", "").endswith(" run"):
            out.extend(argv[i + 1 :])  # the script and its own arguments: never ours to read
            break
        i += 1
    return out


def _die_by(name: str) -> None:
    """End this process by the signal that stopped the program (its report is written), as python
    ends on an uncaught KeyboardInterrupt or on SIGTERM: a shell or a supervisor sees the same status."""
    import signal

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    number = getattr(signal, name)
    signal.signal(number, signal.SIG_DFL)
    os.kill(os.getpid(), number)


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None:  # the command line itself, not an API call inside a host
        from .verifying.warm import process_is_the_command

        process_is_the_command()
    args_list = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in args_list if not a.startswith("-")), None)
    if first is not None and first == args_list[0]:
        from .commands import COMMANDS

        close = difflib.get_close_matches(first, COMMANDS, n=1, cutoff=0.6)
        if first not in COMMANDS and close:
            print(
                f"dtype-doctor: error: unknown command {first!r}: did you mean {close[0]!r}?", file=sys.stderr
            )
            return EXIT_USAGE
    parser = build_parser(only=first if first and first == args_list[0] else None)
    try:
        _project_defaults(parser)
    except DoctorError as exc:
        print(f"dtype-doctor: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    args = parser.parse_args(json_value_guard(parser, args_list))
    if not getattr(args, "_run", None):
        parser.print_help()
        return EXIT_USAGE
    from .commands import exit_status
    from .commands._output import check_output_paths, json_stdout_guard, stdout_taken
    from .commands._patch import diff_on_stdout

    try:
        check_output_paths(args)
        # with JSON (SARIF, annotations) on stdout, or `--diff`, stdout carries it alone: user code's
        # output goes to stderr
        quiet = stdout_taken(args) or diff_on_stdout(args)
        with json_stdout_guard() if quiet else contextlib.nullcontext():
            code = int(args._run(args) or 0)
        shown = getattr(args, "shown_report", None)
        if argv is None and shown is not None and shown.meta.get("signal"):
            _die_by(shown.meta["signal"])  # the command line's own process: as python, by the signal
        return exit_status(code, shown, getattr(args, "fail_on", None), own_code=args.command == "run")
    except DoctorError as exc:
        print(f"dtype-doctor {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except SystemExit as exc:  # user code (a factory, a model) called sys.exit: say so, do not vanish
        if args.command == "run":
            raise
        print(f"dtype-doctor {args.command}: error: user code called sys.exit({exc.code!r})", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # the reader closed the pipe (`| head -1`): not an error, and nothing more to say
        _silence_stdout()
        return EXIT_OK
    except Exception as exc:  # never show the user a traceback of the tool itself
        if os.environ.get("DTYPE_DOCTOR_DEBUG"):
            raise
        print(
            f"dtype-doctor {args.command}: internal error: {type(exc).__name__}: {exc} "
            "(set DTYPE_DOCTOR_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return EXIT_USAGE


def _project_defaults(parser: argparse.ArgumentParser) -> None:
    """`[tool.dtype-doctor]` of the nearest pyproject.toml as every command's defaults (flags override)."""
    from .commands._config import apply, find

    found = find()
    sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    for command in sub.choices.values() if sub is not None and found is not None else ():
        apply(command, found)


def _silence_stdout() -> None:
    """Point fd 1 at /dev/null so the interpreter's final flush does not fail again (Python docs, SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass
