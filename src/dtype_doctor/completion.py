"""Shell completion scripts (bash, zsh, fish) generated from the CLI's argparse parser itself: the
subcommands, each one's options and the choices of those that have them, so the scripts cannot
fall behind the CLI. Words that are not options complete as file names (scripts, logs, reports)."""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Callable
from dataclasses import dataclass

PROG = "dtype-doctor"
WIDTH = 80  # no line of a script wider (issue 32: no command's output is wider than the terminal)


@dataclass(frozen=True)
class Option:
    flags: tuple[str, ...]
    help: str
    takes_value: bool
    choices: tuple[str, ...] = ()


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    options: tuple[Option, ...]
    words: tuple[str, ...] = ()  # the choices of its positional arguments (completion's SHELL)


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if not action.help or action.help == argparse.SUPPRESS:
        return ""
    try:
        text = parser._get_formatter()._expand_help(action)  # %(default)s and the like filled in
    except (KeyError, TypeError, ValueError):
        text = action.help
    return " ".join(text.split())


def _options(parser: argparse.ArgumentParser) -> tuple[Option, ...]:
    return tuple(
        Option(
            flags=tuple(action.option_strings),
            help=_help(parser, action),
            takes_value=action.nargs not in (0, "?"),  # `--json [PATH]`: the next word may be an option
            choices=tuple(str(c) for c in action.choices or ()),
        )
        for action in parser._actions
        if action.option_strings and action.help != argparse.SUPPRESS
    )


def _words(parser: argparse.ArgumentParser) -> tuple[str, ...]:
    return tuple(str(c) for a in parser._actions if not a.option_strings for c in a.choices or ())


def commands(parser: argparse.ArgumentParser) -> tuple[tuple[Option, ...], tuple[Command, ...]]:
    """(the top level's options, the subcommands) read from `parser`."""
    sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    helps = {a.dest: a.help or "" for a in getattr(sub, "_choices_actions", ())}
    found = tuple(
        Command(name, " ".join(helps.get(name, "").split()), _options(subparser), _words(subparser))
        for name, subparser in (sub.choices.items() if sub is not None else ())
    )
    return _options(parser), found


def bash(parser: argparse.ArgumentParser) -> str:
    top, found = commands(parser)
    names = " ".join(c.name for c in found)
    cases = []
    for command in found:
        valued = [o for o in command.options if o.takes_value]
        choice_cases = [
            f'                {"|".join(o.flags)}) COMPREPLY=($(compgen -W "{" ".join(o.choices)}" -- "$cur")); return ;;'
            for o in valued
            if o.choices
        ]
        path_flags = [f for o in valued if not o.choices for f in o.flags]
        if path_flags:
            choice_cases.append(f"                {'|'.join(path_flags)}) return ;;")  # a value: file names
        flags = " ".join(f for o in command.options for f in o.flags)
        cases.append(
            f"        {command.name})\n"
            + (
                '            case "$prev" in\n' + "\n".join(choice_cases) + "\n            esac\n"
                if choice_cases
                else ""
            )
            + f'            opts="{flags}" words="{" ".join(command.words)}" ;;'
        )
    top_flags = " ".join(f for o in top for f in o.flags)
    return _fold_shell(f"""\
# {PROG} completion for bash, made from its parser
_dtype_doctor() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    local cmd="" opts="" words="" i
    for ((i = 1; i < COMP_CWORD; i++)); do
        case "${{COMP_WORDS[i]}}" in
            {"|".join(c.name for c in found)}) cmd="${{COMP_WORDS[i]}}"; break ;;
        esac
    done
    case "$cmd" in
        "")
            COMPREPLY=($(compgen -W "{top_flags} {names}" -- "$cur")); return ;;
{chr(10).join(cases)}
    esac
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$opts" -- "$cur"))
    elif [[ -n "$words" ]]; then
        COMPREPLY=($(compgen -W "$words" -- "$cur"))
    fi  # anything else: bash's own file names (-o default)
}}
complete -o default -F _dtype_doctor {PROG}
""")


def _fold_shell(script: str, width: int = WIDTH) -> str:
    """Each line longer than `width` continued on the next with a backslash-newline, split at a space
    or after a `|` (a word list in double quotes, a case pattern): the shell reads it unchanged."""
    out = []
    for line in script.splitlines():
        indent = " " * (len(line) - len(line.lstrip()) + 4)
        while len(line) > width and not line.lstrip().startswith("#"):  # a comment: not continued
            cut = max(line.rfind(" ", len(indent), width - 2), line.rfind("|", len(indent), width - 3) + 1)
            if cut <= len(indent):
                break
            out.append(line[:cut].rstrip() + " \\")
            line = indent + line[cut:].lstrip()
        out.append(line)
    return "\n".join(out) + "\n"


def zsh(parser: argparse.ArgumentParser) -> str:
    """zsh runs the bash script through its bashcompinit."""
    return (
        f"# {PROG} completion for zsh, made from its parser\n"
        "(( $+functions[compdef] )) || { autoload -U +X compinit && compinit }\n"
        "autoload -U +X bashcompinit && bashcompinit\n" + bash(parser).split("\n", 1)[1]
    )


def _fish_quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _fish_line(parts: list[str], description: str = "") -> str:
    """One `complete` call, continued on indented lines where it would pass WIDTH; the description
    shortened to fit its own line (fish shows it cut to the pager's width anyway)."""
    if description:
        room = WIDTH - 4 - len("-d ''")
        parts = [*parts, "-d " + _fish_quote(textwrap.shorten(description, room, placeholder="..."))]
    lines = [parts[0]]
    for part in parts[1:]:
        if len(lines[-1]) + 1 + len(part) + 2 > WIDTH:
            lines[-1] += " \\"
            lines.append("    " + part)
        else:
            lines[-1] += " " + part
    return "\n".join(lines)


def _fish_option(condition: str, option: Option) -> str:
    parts = [f"complete -c {PROG}", f"-n {_fish_quote(condition)}"]
    for flag in option.flags:
        parts.append(f"-l {flag[2:]}" if flag.startswith("--") else f"-s {flag[1:]}")
    if option.choices:
        parts.append(f"-x -a {_fish_quote(' '.join(option.choices))}")
    elif option.takes_value:
        parts.append("-r -F")
    return _fish_line(parts, option.help)


def fish(parser: argparse.ArgumentParser) -> str:
    top, found = commands(parser)
    lines = [
        f"# {PROG} completion for fish, made from its parser",
        "function __dtype_doctor_no_command\n    not __fish_seen_subcommand_from \\\n"
        + _fold_shell("        " + " ".join(c.name for c in found)).rstrip("\n")
        + "\nend",
    ]
    lines += [_fish_option("__dtype_doctor_no_command", o) for o in top]
    for command in found:
        seen = f"__fish_seen_subcommand_from {command.name}"
        lines.append(
            _fish_line(
                [f"complete -c {PROG} -f", "-n __dtype_doctor_no_command", f"-a {command.name}"], command.help
            )
        )
        lines += [_fish_option(seen, o) for o in command.options]
        if command.words:
            lines.append(
                _fish_line(
                    [
                        f"complete -c {PROG} -f",
                        f"-n {_fish_quote(seen)}",
                        f"-a {_fish_quote(' '.join(command.words))}",
                    ]
                )
            )
    return "\n".join(lines) + "\n"


SHELLS: dict[str, Callable[[argparse.ArgumentParser], str]] = {"bash": bash, "zsh": zsh, "fish": fish}


def script(shell: str, parser: argparse.ArgumentParser) -> str:
    """The completion script for `shell` (one of SHELLS)."""
    return SHELLS[shell](parser)
