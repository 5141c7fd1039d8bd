"""ruff's output options: `--output-format FORMAT` and `--output-file PATH` on every report-producing
command, and the older spellings (`-o/--output FORMAT[=PATH]`, `--json [PATH]`, `--html PATH`),
kept as aliases for one release, writing the same bytes."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from cli_process import ENV, dtype_doctor
from dtype_doctor.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
LOG = str(ROOT / "examples" / "logs" / "cogvlm.log")
MISMATCH = "RuntimeError: mat1 and mat2 must have the same dtype, but got Half and Float"

# format -> (its file's extension, every spelling that writes it to the file {p})
SPELLINGS = {
    "json": (
        ".json",
        [
            ["--json", "{p}"],
            ["--json={p}"],
            ["-o", "json={p}"],
            ["-o", "{p}"],
            ["--output", "json={p}"],
        ],
    ),
    "html": (".html", [["--html", "{p}"], ["-o", "html={p}"], ["-o", "{p}"]]),
    "sarif": (".sarif", [["-o", "sarif={p}"], ["-o", "{p}"]]),
    "github": (".github.txt", [["-o", "github={p}"], ["-o", "{p}"]]),
    "text": (".txt", [["-o", "text={p}"], ["-o", "{p}"]]),
    "console": (".console.txt", [["-o", "console={p}"], ["-o", "{p}"]]),
}


@pytest.mark.parametrize("fmt", list(SPELLINGS))
def test_every_spelling_of_a_file_output_writes_the_same_bytes(fmt, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    extension, aliases = SPELLINGS[fmt]
    spellings = [
        ["--output-format", fmt, "--output-file", "{p}"],
        ["--output-file", "{p}"],  # the format by the extension
        *aliases,
    ]
    written = {}
    for i, spelling in enumerate(spellings):
        path = f"out{i}/report{extension}"
        argv = ["explain", "--no-color", "--file", LOG, *(a.format(p=path) for a in spelling)]
        assert main(argv) == 0, capsys.readouterr().err
        written[" ".join(spelling)] = (tmp_path / path).read_bytes()
    capsys.readouterr()
    first = written[" ".join(spellings[0])]
    assert len(first) > 300
    assert {k: v == first for k, v in written.items()} == dict.fromkeys(written, True)


@pytest.mark.parametrize("fmt", ["json", "sarif", "github", "text"])
def test_output_format_without_a_file_is_stdout_as_the_aliases(fmt, capsys):
    spellings = [
        ["--output-format", fmt],
        ["-o", fmt],
        ["--output", fmt],
        *([["--json"]] if fmt == "json" else []),
    ]
    printed = []
    for spelling in spellings:
        assert main(["explain", "--no-color", "--file", LOG, *spelling]) == 0
        printed.append(capsys.readouterr().out)
    assert len(printed[0]) > 200 and printed == [printed[0]] * len(spellings)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--output-format", "html"], "--output-format html needs a PATH: add --output-file PATH"),
        (["--output-format", "png"], "--output-format png needs a PATH: add --output-file PATH"),
        (["--output-file", "report.out"], "--output-file report.out: no format's extension ends it ("),
        (["--output-format", "json", "--json"], "json and json both want stdout: give one of them a PATH"),
        (["--output-format", "sarif", "-o", "github"], "sarif and github both want stdout"),
    ],
)
def test_a_format_or_file_that_cannot_be_written_is_one_line_and_exit_2(
    argv, message, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    assert main(["explain", *argv, MISMATCH]) == 2
    out, err = capsys.readouterr()
    assert message in err and len(err.strip().splitlines()) == 1 and out == ""
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--output-format", "yaml"], "argument --output-format: invalid choice: 'yaml'"),
        (["--output-file", "a.json", "--output-file", "b.json"], "--output-file given twice"),
        (["--output-file="], "--output-file needs a PATH, got an empty value"),
    ],
)
def test_bad_option_values_are_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["explain", *argv, MISMATCH])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def _report_commands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {
        name: p for name, p in sub.choices.items() if any("--json" in a.option_strings for a in p._actions)
    }


def test_every_report_command_has_the_options_and_help_names_the_aliases(capsys):
    commands = _report_commands()
    assert set(commands) == {"explain", "run", "check", "audit", "numerics", "compare", "env", "merge"}
    for name in commands:
        with pytest.raises(SystemExit):
            main([name, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "--output-format FORMAT" in text and "--output-file PATH" in text, name
        for alias in (
            "-o FORMAT[=PATH], --output FORMAT[=PATH] alias kept for one release",
            "--json [PATH] alias kept for one release",
            "--html PATH alias kept for one release",
        ):
            assert alias in text, (name, alias)


SCRIPT = "import torch\nx = torch.ones(2, 2)\nw = torch.ones(2, 2, dtype=torch.float16)\nprint(x @ w)\n"


def test_run_writes_the_same_report_with_either_spelling_and_leaves_the_script_its_own(tmp_path):
    """The new options take a value, so the script and its arguments are still the script's."""
    (tmp_path / "s.py").write_text(SCRIPT)
    env = {**ENV, "DTYPE_DOCTOR_BUDGET": "0"}
    new = dtype_doctor(
        "run", "--output-format", "json", "--output-file", "a.json", "s.py", "--json", cwd=tmp_path, env=env
    )
    old = dtype_doctor("run", "--json", "b.json", "s.py", "--json", cwd=tmp_path, env=env)
    assert new.returncode == old.returncode == 1, new.stderr[-2000:]
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    assert '"code": "matmul-dtype-mismatch"' in (tmp_path / "a.json").read_text()
    on_stdout = dtype_doctor("run", "--output-format", "json", "s.py", "--json", cwd=tmp_path, env=env)
    assert on_stdout.stdout == (tmp_path / "a.json").read_text()
