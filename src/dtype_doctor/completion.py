"""Shell completion scripts (bash, zsh, fish) generated from the CLI's argparse parser itself: the
subcommands, each one's options and the choices of those that have them, so the scripts cannot
fall behind the CLI. Words that are not options complete as file names (scripts, logs, reports)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

PROG = "dtype-doctor"


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
            choice_cases.append(f"                {'|'.join(path_flags)}) return ;;  # a value: files")
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
    return f"""\
# {PROG} completion for bash (generated from its parser: `{PROG} completion bash`)
_dtype_doctor() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}" cmd="" opts words i
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
"""


def zsh(parser: argparse.ArgumentParser) -> str:
    """zsh runs the bash script through its bashcompinit."""
    return (
        f"# {PROG} completion for zsh (generated from its parser: `{PROG} completion zsh`)\n"
        "(( $+functions[compdef] )) || { autoload -U +X compinit && compinit }\n"
        "autoload -U +X bashcompinit && bashcompinit\n" + bash(parser).split("\n", 1)[1]
    )


def _fish_quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _fish_option(condition: str, option: Option) -> str:
    parts = [f"complete -c {PROG} -n {_fish_quote(condition)}"]
    for flag in option.flags:
        parts.append(f"-l {flag[2:]}" if flag.startswith("--") else f"-s {flag[1:]}")
    if option.choices:
        parts.append(f"-x -a {_fish_quote(' '.join(option.choices))}")
    elif option.takes_value:
        parts.append("-r -F")
    if option.help:
        parts.append(f"-d {_fish_quote(option.help)}")
    return " ".join(parts)


def fish(parser: argparse.ArgumentParser) -> str:
    top, found = commands(parser)
    names = " ".join(c.name for c in found)
    lines = [f"# {PROG} completion for fish (generated from its parser: `{PROG} completion fish`)"]
    lines += [_fish_option(f"not __fish_seen_subcommand_from {names}", o) for o in top]
    for command in found:
        lines.append(
            f"complete -c {PROG} -f -n {_fish_quote(f'not __fish_seen_subcommand_from {names}')} "
            f"-a {command.name} -d {_fish_quote(command.help)}"
        )
        lines += [_fish_option(f"__fish_seen_subcommand_from {command.name}", o) for o in command.options]
        if command.words:
            lines.append(
                f"complete -c {PROG} -f -n {_fish_quote(f'__fish_seen_subcommand_from {command.name}')} "
                f"-a {_fish_quote(' '.join(command.words))}"
            )
    return "\n".join(lines) + "\n"


SHELLS: dict[str, Callable[[argparse.ArgumentParser], str]] = {"bash": bash, "zsh": zsh, "fish": fish}


def script(shell: str, parser: argparse.ArgumentParser) -> str:
    """The completion script for `shell` (one of SHELLS)."""
    return SHELLS[shell](parser)
