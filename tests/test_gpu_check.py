"""`make gpu-check` (scripts/gpu_check.py) on a machine without a CUDA device: one line, exit 2, nothing
run and no summary written (on a GPU machine it runs tests/gpu, the CUDA benchmarks and the table)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_check.py"


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is here: gpu-check would run")
def test_gpu_check_without_a_cuda_device_fails_cleanly(tmp_path):
    out = tmp_path / "gpu-check"
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out)],
        capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300,
    )  # fmt: skip
    assert run.returncode == 2
    assert run.stderr == "gpu-check: no CUDA device here (torch.cuda.is_available() is False); nothing run\n"
    assert run.stdout == "" and not out.exists()
