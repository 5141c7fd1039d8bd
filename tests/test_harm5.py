"""Issue 42 (first, do no harm, round 5): exits, pipes, odd names and schema truth, through the real CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cli_process import ENV

MISMATCH_FACTORY = """
import torch

def build():
    return torch.nn.Sequential(torch.nn.Linear(4, 4).half(), torch.nn.Linear(4, 4))
"""


def _script(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def _reader_gone(argv: list[str], cwd: Path) -> tuple[int, str]:
    """Run with stdout a pipe whose reader closed before the first write (`... | true`): exit code, stderr."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV, cwd=cwd)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    return proc.wait(timeout=300), err


# H15: the reader of stdout closing early keeps the exit status (as python keeps the script's own)
@pytest.mark.parametrize(
    ("argv", "want"),
    [
        (["run", "--json", "quits.py"], 3),
        (["run", "-o", "sarif", "quits.py"], 3),
        (["check", "model.py:build", "--input", "2x4"], 1),
        (["check", "--json", "model.py:build", "--input", "2x4"], 1),
    ],
    ids=["run-json", "run-sarif", "check", "check-json"],
)
def test_a_closed_stdout_keeps_the_exit_status(tmp_path, argv, want):
    _script(tmp_path, "quits.py", "import sys\nsys.exit(3)\n")
    _script(tmp_path, "model.py", MISMATCH_FACTORY)
    python, _ = _reader_gone([sys.executable, "quits.py"], tmp_path)
    assert python == 3  # the reference: python's own status under `| true`
    code, err = _reader_gone([sys.executable, "-m", "dtype_doctor", *argv], tmp_path)
    assert code == want, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_a_closed_stdout_keeps_the_diffs_exit_status(tmp_path):
    _script(
        tmp_path,
        "fails.py",
        """
        import sys
        import torch
        layer = torch.nn.Linear(4, 4).half()
        try:
            layer(torch.randn(2, 4))
        except RuntimeError:
            pass
        sys.exit(3)  # no edit cures the exit: `--diff` shows the closest and fails
        """,
    )
    argv = [sys.executable, "-m", "dtype_doctor", "run", "--diff", "--budget", "60", "fails.py"]
    shown = subprocess.run(argv, capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=300)
    assert shown.stdout.startswith("---"), shown.stderr  # a diff is written to stdout
    code, err = _reader_gone(argv, tmp_path)
    assert code == shown.returncode != 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err and "Exception ignored" not in err, err


# H16: a program that closes fd 2 (or reuses it for a file of its own) and exits 4
CLOSES_STDERR = {
    "closes": "import os, sys\nos.close(2)\nsys.exit(4)\n",
    "reuses": "import os, sys\nos.close(2)\nlog = open('mine.log', 'w')\nsys.exit(4)\n",
}


@pytest.mark.parametrize("kind", sorted(CLOSES_STDERR))
def test_a_program_closing_stderr_keeps_its_code_and_the_report(tmp_path, kind):
    _script(tmp_path, "quiet.py", CLOSES_STDERR[kind])
    python = subprocess.run([sys.executable, "quiet.py"], env=ENV, cwd=tmp_path, timeout=60)
    assert python.returncode == 4
    argv = [sys.executable, "-m", "dtype_doctor", "run", "--json=out.json", "quiet.py"]
    done = subprocess.run(argv, capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=300)
    assert done.returncode == 4, done.stderr
    report = json.loads((tmp_path / "out.json").read_text())
    assert report["tool"] == "run" and report["meta"]["program"] == "quiet.py"
    if kind == "reuses":  # fd 2 is the program's file now: the tool writes nothing into it
        assert (tmp_path / "mine.log").read_text() == ""
    on_stdout = subprocess.run(
        [*argv[:3], "run", "--json", "quiet.py"], capture_output=True, text=True, env=ENV, cwd=tmp_path
    )
    assert on_stdout.returncode == 4 and json.loads(on_stdout.stdout)["tool"] == "run", on_stdout.stderr


# H19: a program ending in os._exit(N): python's N, and a report of the run up to there
OS_EXIT = {
    "after-a-mismatch": (
        """
        import os
        import torch
        layer = torch.nn.Linear(4, 4).half()
        try:
            layer(torch.randn(2, 4))
        except RuntimeError:
            pass
        print("done", flush=True)
        os._exit(0)
        """,
        0,
    ),
    "clean": ("import os\nimport torch\ntorch.ones(2) + 1\nos._exit(5)\n", 5),
}


@pytest.mark.parametrize("kind", sorted(OS_EXIT))
def test_a_program_ending_in_os_exit_keeps_its_code_and_is_reported(tmp_path, kind):
    source, status = OS_EXIT[kind]
    _script(tmp_path, "leaves.py", source)
    python = subprocess.run([sys.executable, "leaves.py"], env=ENV, cwd=tmp_path, timeout=120)
    assert python.returncode == status
    argv = [sys.executable, "-m", "dtype_doctor", "run", "--json=out.json", "leaves.py"]
    done = subprocess.run(argv, capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=300)
    assert done.returncode == status, done.stderr
    assert f"os._exit({status})" in done.stderr, done.stderr  # one line says how the program ended
    report = json.loads((tmp_path / "out.json").read_text())
    assert report["meta"]["ended_by"] == f"os._exit({status})"
    codes = [f["code"] for f in report["findings"]]
    assert ("matmul-dtype-mismatch" in codes) == (kind == "after-a-mismatch"), codes
