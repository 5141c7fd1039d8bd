"""The CLI's argparse parser: one subparser per command module (`commands.COMMANDS`). Here, below
`cli`, so that a command that reads the whole parser (`completion`) need not import `cli`."""

from __future__ import annotations

import argparse
import importlib

from . import EXIT_USAGE


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, like the rest of the tool
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser; with `only`, just that command's subparser (start-up: explain's budget is 0.3 s)."""
    from .. import __version__
    from . import COMMANDS

    parser = _Parser(
        prog="dtype-doctor",
        description="Name, locate and fix PyTorch mixed-precision (fp16/bf16) failures.",
        epilog="Exit codes: 0 ok/diagnosed, 1 problems found, 2 bad usage or input, 3 nothing recognised.",
    )
    parser.add_argument("--version", action="version", version=f"dtype-doctor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in (only,) if only in COMMANDS else COMMANDS:
        try:
            module = importlib.import_module(f".{name}", __package__)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.endswith(f"commands.{name}"):
                continue  # command not shipped in this build
            raise
        p = sub.add_parser(name, help=module.HELP, description=getattr(module, "DESCRIPTION", module.HELP))
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser
