"""Issue 42 H2/H3: every output path is fixed against the folder the command started in, before the
user's program runs (a program that changes folder keeps its own files), and no output ever
replaces the script or a source file the report's fixes edit."""

from __future__ import annotations

import json
import textwrap

import pytest

from cli_process import ENV, dtype_doctor

NO_EXPERIMENT = {**ENV, "DTYPE_DOCTOR_BUDGET": "0"}  # the report of the run itself, no re-runs

CHDIR_THEN_FAIL = textwrap.dedent(
    """\
    import os

    import torch

    os.makedirs("runs/exp1", exist_ok=True)
    os.chdir("runs/exp1")
    with open("report.json", "w") as fh:
        fh.write('{"mine": true}\\n')
    w = torch.ones(2, 2, dtype=torch.float16)
    x = torch.ones(2, 2)
    print(x @ w)
    """
)


@pytest.mark.parametrize(
    "spelling",
    [["--json", "report.json"], ["--output-file", "report.json"], ["-o", "json=report.json"]],
    ids=["--json", "--output-file", "-o"],
)
def test_a_program_that_changes_folder_keeps_its_own_file_and_the_report_lands_where_asked(
    tmp_path, spelling
):
    (tmp_path / "train.py").write_text(CHDIR_THEN_FAIL)
    done = dtype_doctor(
        "run", *spelling, "-o", "sarif=out/r.sarif", "train.py", cwd=tmp_path, env=NO_EXPERIMENT
    )
    assert done.returncode == 1, done.stderr[-3000:]
    assert (tmp_path / "runs" / "exp1" / "report.json").read_text() == '{"mine": true}\n'
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["tool"] == "run" and report["findings"][0]["code"] == "matmul-dtype-mismatch"
    assert not (tmp_path / "runs" / "exp1" / "out").exists()
    # SARIF names the script from the folder the command started in, not from the program's new one
    (result,) = json.loads((tmp_path / "out" / "r.sarif").read_text())["runs"][0]["results"]
    location = result["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "train.py" and location["region"]["startLine"] == 11


@pytest.mark.parametrize(
    "spelling",
    [
        ["-o", "json=train.py"],
        ["--output-format", "json", "--output-file", "train.py"],
        ["--html", "./train.py"],
    ],
)
def test_an_output_over_the_script_is_refused_before_it_runs(tmp_path, spelling):
    (tmp_path / "train.py").write_text(CHDIR_THEN_FAIL)
    done = dtype_doctor("run", *spelling, "train.py", cwd=tmp_path, env=NO_EXPERIMENT)
    assert done.returncode == 2
    assert (
        done.stderr.count("\n") == 1
        and "is one of the inputs (train.py): it would be overwritten" in done.stderr
    )
    assert (tmp_path / "train.py").read_text() == CHDIR_THEN_FAIL
    assert not (tmp_path / "runs").exists()  # the program never ran


HELPER = "import torch\n\n\ndef make():\n    return torch.ones(2, 2)\n"
MAIN = "import torch\nimport helper\n\nw = torch.ones(2, 2, dtype=torch.float16)\nx = helper.make()\nprint(x @ w)\n"


@pytest.mark.parametrize(
    ("spelling", "label"),
    [
        (["-o", "json=helper.py"], "--output json=helper.py"),
        (
            ["--output-format", "json", "--output-file", "helper.py"],
            "--output-format json --output-file helper.py",
        ),
    ],
    ids=["-o", "--output-file"],
)
def test_an_output_over_a_source_file_the_fixes_edit_is_refused_when_written(tmp_path, spelling, label):
    """helper.py is no input of the command line: the fix that edits it is known after the run."""
    (tmp_path / "helper.py").write_text(HELPER)
    (tmp_path / "main.py").write_text(MAIN)
    done = dtype_doctor("run", *spelling, "main.py", cwd=tmp_path, env=NO_EXPERIMENT)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1] == (
        f"dtype-doctor run: error: {label} is a source file the report's fixes edit (helper.py): "
        "it would be overwritten"
    )
    assert (tmp_path / "helper.py").read_text() == HELPER
    assert "ERROR matmul-dtype-mismatch" in done.stderr  # the report is still shown
