"""Shell completion scripts (bash, zsh, fish), made by shtab from the CLI's argparse parser itself:
the subcommands, each one's options and the choices of those that have them, so the scripts cannot
fall behind the CLI. A value that has no choices (a script, a log, a report, an output file)
completes as a file name."""

from __future__ import annotations

import argparse
import textwrap

SHELLS = ("bash", "zsh", "fish")  # shtab's; its tcsh and powershell are not offered (untested here)
WIDTH = 80  # no line of the bash script wider (issue 32: no command's output is wider than the terminal)


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
    made = shtab.complete(parser, shell=shell)
    return fold_bash(made) if shell == "bash" else made


def fold_bash(script: str, width: int = WIDTH) -> str:
    """Each line of a bash script longer than `width` continued on the next after a backslash, cut at
    a space outside quotes (bash reads it unchanged); a comment wrapped as comment lines."""
    out: list[str] = []
    for line in script.splitlines():
        body = line.lstrip()
        indent = line[: len(line) - len(body)]
        if len(line) > width and body.startswith("#"):
            text = body.lstrip("#").strip()
            prefix = f"{indent}# "
            out += textwrap.wrap(
                text, width, initial_indent=prefix, subsequent_indent=prefix, break_on_hyphens=False
            )
            continue
        more = indent + "    "
        while len(line) > width:
            cuts = [i for i in _unquoted_spaces(line) if len(more) < i <= width - 2]
            if not cuts:
                break
            out.append(line[: cuts[-1]].rstrip() + " \\")
            line = more + line[cuts[-1] :].lstrip()
        out.append(line)
    return "\n".join(out) + "\n"


def _unquoted_spaces(line: str) -> list[int]:
    """The positions of the spaces of a shell line outside quotes and escapes."""
    spots: list[int] = []
    quote, escaped = "", False
    for i, ch in enumerate(line):
        if escaped:
            escaped = False
        elif ch == "\\" and quote != "'":
            escaped = True
        elif quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == " ":
            spots.append(i)
    return spots
