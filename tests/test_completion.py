"""`dtype-doctor completion SHELL`: scripts made by shtab from the CLI's own parser, so every
command and option the CLI has completes (issue 32); bash's is sourced and run as bash runs it."""

from __future__ import annotations

import argparse
import shutil
import subprocess
from pathlib import Path

import pytest

from dtype_doctor.cli import build_parser, main
from dtype_doctor.commands import COMMANDS
from dtype_doctor.render.registry import names

# COMPREPLY for the words given, the last one being completed, as bash's completion would fill it
COMPLETE = """
source "$1"; shift
complete -p dtype-doctor
COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); COMPREPLY=()
_shtab_dtype_doctor 2>/dev/null  # compopt complains outside a real completion: harmless
echo "${COMPREPLY[*]}"
"""


def _script(shell: str, tmp_path, capsys) -> str:
    assert main(["completion", shell]) == 0
    path = tmp_path / f"dtype-doctor.{shell}"
    path.write_text(capsys.readouterr().out)
    return str(path)


@pytest.fixture
def bash_complete(tmp_path, capsys):
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    script = _script("bash", tmp_path, capsys)
    here = tmp_path / "project"
    here.mkdir()
    (here / "train.py").write_text("print('hi')\n")
    (here / "report.json").write_text("{}\n")

    def complete(*words: str) -> tuple[str, list[str]]:
        done = subprocess.run(
            ["bash", "-c", COMPLETE, "complete", script, "dtype-doctor", *words],
            capture_output=True,
            text=True,
            check=True,
            cwd=here,
        )
        registered, replies = done.stdout.splitlines()
        return registered, replies.split()

    return complete


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def test_bash_completes_every_command_and_every_option(bash_complete):
    registered, replies = bash_complete("")
    assert registered == "complete -o bashdefault -F _shtab_dtype_doctor dtype-doctor"
    assert set(replies) == set(COMMANDS)
    assert {"--help", "--version"} <= set(bash_complete("--")[1])
    for name, parser in _subparsers().items():
        flags = {f for a in parser._actions for f in a.option_strings if f.startswith("--")}
        assert flags <= set(bash_complete(name, "--")[1]), name
    assert bash_complete("run", "--output-f")[1] == ["--output-format", "--output-file"]


def test_bash_completes_choices_and_file_names(bash_complete):
    assert bash_complete("run", "--mode", "")[1] == ["observe", "strict", "fix"]
    assert bash_complete("explain", "--fail-on", "w")[1] == ["warning"]
    assert bash_complete("completion", "")[1] == ["bash", "zsh", "fish"]
    assert bash_complete("check", "--output-format", "")[1] == list(names())
    assert sorted(bash_complete("run", "")[1]) == ["report.json", "train.py"]  # the script
    assert bash_complete("merge", "--output-file", "rep")[1] == ["report.json"]
    assert bash_complete("check", "--hf-config", "t")[1] == ["train.py"]
    assert bash_complete("run", "--json", "--di")[1] == ["--diff"]  # --json's PATH is optional


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_scripts_name_every_command_and_parse(shell, tmp_path, capsys):
    script = _script(shell, tmp_path, capsys)
    text = Path(script).read_text()
    assert all(f"{name}:" in text or f"-a {name} " in text for name in COMMANDS)
    assert "fail-on" in text and "output-format" in text
    if shutil.which(shell):
        subprocess.run([shell, "-n", script], check=True)


def test_no_line_of_the_bash_script_is_wider_than_80(capsys):
    """Issue 32: no command's output is wider than the terminal; shtab's long lines go on after a
    backslash (cut outside quotes, so the completions above still hold)."""
    assert main(["completion", "bash"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert any(line.endswith(" \\") for line in lines)  # and some were long enough to continue


def test_an_unknown_shell_is_one_line_and_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["completion", "tcsh"])
    assert exit_.value.code == 2
    assert (
        capsys.readouterr().err.strip().endswith("invalid choice: 'tcsh' (choose from 'bash', 'zsh', 'fish')")
    )
