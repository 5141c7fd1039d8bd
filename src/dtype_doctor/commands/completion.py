"""`dtype-doctor completion SHELL`: the shell completion script, made by shtab from the CLI's parser."""

from __future__ import annotations

import argparse
import sys

from . import EXIT_OK

HELP = "print the shell completion script (bash, zsh, fish)"
DESCRIPTION = (
    "Print a completion script for SHELL, made by shtab from this CLI's own parser (its commands, "
    "options and their choices; other values complete as file names). bash: "
    "`source <(dtype-doctor completion bash)` in ~/.bashrc; zsh: "
    "`dtype-doctor completion zsh > ~/.zfunc/_dtype-doctor` with `fpath=(~/.zfunc $fpath)` before "
    'compinit in ~/.zshrc (or `eval "$(dtype-doctor completion zsh)"` after compinit); fish: '
    "`dtype-doctor completion fish > ~/.config/fish/completions/dtype-doctor.fish`."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..completion import SHELLS

    parser.add_argument("shell", choices=SHELLS, help="the shell the script is for")


def run(args: argparse.Namespace) -> int:
    from ..completion import script
    from .parser import build_parser

    sys.stdout.write(script(args.shell, build_parser()))
    return EXIT_OK
