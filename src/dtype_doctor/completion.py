"""Shell completion scripts (bash, zsh, fish), made by shtab from the CLI's argparse parser itself:
the subcommands, each one's options and the choices of those that have them, so the scripts cannot
fall behind the CLI. A value that has no choices (a script, a log, a report, an output file)
completes as a file name."""

from __future__ import annotations

import argparse

SHELLS = ("bash", "zsh", "fish")  # shtab's; its tcsh and powershell are not offered (untested here)


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """`parser` and every subcommand's parser."""
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += _parsers(sub)
    return found


def _values_are_files(parser: argparse.ArgumentParser) -> None:
    """Mark every argument that takes a value and has no choices as a file name for shtab. An
    optional value (`--json [PATH]`) is left unmarked, so the word after it can still be an option."""
    import shtab

    for each in _parsers(parser):
        for action in each._actions:
            optional_value = bool(action.option_strings) and action.nargs == "?"
            takes_value = action.nargs != 0 and not isinstance(action, argparse._SubParsersAction)
            if takes_value and not optional_value and not action.choices:
                action.complete = shtab.FILE  # type: ignore[attr-defined]


def script(shell: str, parser: argparse.ArgumentParser) -> str:
    """The completion script for `shell` (one of SHELLS)."""
    import shtab

    _values_are_files(parser)
    return shtab.complete(parser, shell=shell)
