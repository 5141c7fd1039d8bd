"""Issue 42 (first, do no harm, round 5): exits, pipes, odd names and schema truth, through the real CLI."""

from __future__ import annotations

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
