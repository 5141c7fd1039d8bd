"""An autocast region written for another device does nothing for the program's tensors (a "cuda"
region over CPU tensors, `torch.cuda.amp.autocast()` on CPU: torch turns it off with a warning), so a
bfloat16 input meets a float32 layer. The first fix is the region made one for the tensors' device,
at the `with` line, verified by a re-run; applied by the independent applier, plain python passes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli_process import dtype_doctor, fix_by_hand

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
ENV.pop("DTYPE_DOCTOR_BUDGET", None)  # the default budget: the experiment tries the candidates

SCRIPT = """import torch
from torch import nn


def step(model, x):
    return model(x)


model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4))
x = torch.randn(2, 8, dtype=torch.bfloat16)
with {region}:
    y = step(model, x)
print(y.dtype)
"""


@pytest.mark.parametrize(
    ("region", "written"),
    [
        ('torch.autocast("cuda")', 'with torch.autocast("cpu"):'),
        (
            "torch.autocast(device_type='cuda', dtype=torch.bfloat16)",
            'torch.autocast(device_type="cpu", dtype=',
        ),
        (
            "torch.cuda.amp.autocast(dtype=torch.bfloat16)",
            'with torch.autocast("cpu", dtype=torch.bfloat16):',
        ),
    ],
    ids=["positional", "keyword", "cuda-amp"],
)
def test_a_region_for_another_device_is_the_first_fix(tmp_path: Path, region: str, written: str) -> None:
    (tmp_path / "prog.py").write_text(SCRIPT.format(region=region))
    proc = dtype_doctor("run", "--json=r.json", "prog.py", cwd=tmp_path, env=ENV)
    assert proc.returncode == 1 and "RuntimeError" in proc.stderr, proc.stderr[-2000:]
    report = json.loads((tmp_path / "r.json").read_text())
    fix = next(f for f in report["findings"] if f["severity"] == "error")["fixes"][0]
    assert "autocast region at prog.py:11" in fix["title"], fix["title"]
    assert fix["verified"] is True, fix["verification"]
    assert [e["location"]["row"] for e in fix["edits"]] == [11]
    fix_by_hand().apply_edits(tmp_path, fix["edits"])
    assert written in (tmp_path / "prog.py").read_text()
    ran = subprocess.run([sys.executable, "prog.py"], cwd=tmp_path, env=ENV, capture_output=True, text=True)
    assert ran.returncode == 0 and "torch.bfloat16" in ran.stdout, ran.stderr[-1500:]
