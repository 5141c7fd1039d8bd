"""A reader that closes the pipe (`dtype-doctor explain ... | head -1`) is not an error."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

MSG = "RuntimeError: mat1 and mat2 must have the same dtype, but got Float and Half"


@pytest.mark.parametrize(
    "argv", [["explain", MSG], ["explain", "--json", MSG], ["env"]], ids=["explain", "explain-json", "env"]
)
def test_closed_pipe_exits_quietly(argv):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "100"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "dtype_doctor", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    proc.stdout.close()  # the reader is gone before the first line: every write meets a closed pipe
    err = proc.stderr.read().decode()
    code = proc.wait(timeout=120)
    assert "sys.exit" not in err and "Traceback" not in err and "BrokenPipe" not in err, err
    assert code in (0, 1), (code, err)  # the command's own verdict, never "bad usage" (2)
