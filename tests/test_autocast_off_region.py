"""An autocast region written for another device does nothing for the program's tensors (a "cuda"
region over CPU tensors, `torch.cuda.amp.autocast()` on CPU: torch turns it off with a warning), so a
bfloat16 input meets a float32 layer. The first fix is the region made one for the tensors' device,
at the `with` line, verified by a re-run; applied by the independent applier, plain python passes.
A custom autograd Function's `custom_fwd` without `cast_inputs` under autocast gets it."""

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
    fix = _first_fix(tmp_path, SCRIPT.format(region=region))
    assert "autocast region at prog.py:11" in fix["title"], fix["title"]
    assert fix["verified"] is True, fix["verification"]
    assert [e["location"]["row"] for e in fix["edits"]] == [11]
    _runs_after(tmp_path, fix, written, "torch.bfloat16")


# a custom autograd Function whose forward has `custom_fwd` and no `cast_inputs`: under autocast its
# bfloat16 input (an autocast linear's output) meets its own float32 accumulator in an op autocast
# does not cover; the decorator's own decision (`cast_inputs=torch.float32`, line 8) is the first fix
CUSTOM_FWD = """import torch
from torch import nn
from torch.autograd import Function


class PoolRows(Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cpu")
    def forward(ctx, feats, weights):
        pooled = torch.zeros(feats.shape[0], feats.shape[1], dtype=weights.dtype)
        pooled.index_add_(0, torch.arange(feats.shape[0]), feats)
        return pooled * weights

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.weights = nn.Parameter(torch.ones(8))

    def forward(self, x):
        return PoolRows.apply(self.proj(x), self.weights)


head = Head()
with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
    print(head(torch.randn(4, 8)).dtype)
"""


def test_a_custom_function_under_autocast_gets_cast_inputs(tmp_path: Path) -> None:
    fix = _first_fix(tmp_path, CUSTOM_FWD)
    assert "cast_inputs=torch.float32 (prog.py:8)" in fix["title"], fix["title"]
    assert fix["verified"] is True, fix["verification"]
    _runs_after(
        tmp_path, fix, '@torch.amp.custom_fwd(device_type="cpu", cast_inputs=torch.float32)', "torch.float32"
    )


def _first_fix(tmp_path: Path, script: str) -> dict:
    """`run` on the script as prog.py (it fails with a RuntimeError): the first error's first fix."""
    (tmp_path / "prog.py").write_text(script)
    proc = dtype_doctor("run", "--json=r.json", "prog.py", cwd=tmp_path, env=ENV)
    assert proc.returncode == 1 and "RuntimeError" in proc.stderr, proc.stderr[-2000:]
    report = json.loads((tmp_path / "r.json").read_text())
    fix = next(f for f in report["findings"] if f["severity"] == "error")["fixes"][0]
    return fix


def _runs_after(tmp_path: Path, fix: dict, written: str, prints: str) -> None:
    """The fix applied by the independent applier writes `written`; plain python then prints `prints`."""
    fix_by_hand().apply_edits(tmp_path, fix["edits"])
    assert written in (tmp_path / "prog.py").read_text()
    ran = subprocess.run([sys.executable, "prog.py"], cwd=tmp_path, env=ENV, capture_output=True, text=True)
    assert ran.returncode == 0 and prints in ran.stdout, ran.stderr[-1500:]
