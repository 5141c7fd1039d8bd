"""The line experiment's root is a decision, not the widest cure: it keeps the user's own precision
choices (a literal `dtype=torch.float16`, `.half()`, the library modules a line calls) and tries the
lines that compute in a precision they inherited first; and when the cured lines take their dtype
from a name, the place that name's value was chosen (a caller's argument, an assignment) is tried
alone and, when it cures, is the first fix. The ops a library's code runs for a line (a diffusers
block called under autocast) are that line's; a module-wide cast that rounds a float32 buffer is kept
from its buffers. Each fix is applied by the independent applier and the
script then passes under plain python."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli_process import dtype_doctor, fix_by_hand

ROOT = Path(__file__).resolve().parents[1]
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")]),
    "OMP_NUM_THREADS": "1",
}
ENV.pop("DTYPE_DOCTOR_BUDGET", None)

# positions made in the dtype of the data: above 2048 fp16 integers collapse. The fp16 data (line 8)
# is the user's choice; the positions' derived dtype (line 5) is the root.
DERIVED = """import torch


def positions(x):
    return torch.arange(x.shape[0], dtype=x.dtype)


x = torch.randn(3000, 4, dtype=torch.float16)
pos = positions(x)
distinct = torch.unique(pos).numel()
print("distinct positions", distinct)
assert distinct == x.shape[0], "positions collapsed"
"""

# a table built in the dtype its caller passes: the caller's bf16 (line 10) is the decision
CHOSEN = """import torch


def angle_table(n, dtype):
    t = torch.arange(n, dtype=dtype)
    return (t[:, None] * torch.ones(1, 4, dtype=dtype)).cos()


reference = angle_table(3000, torch.float32)
table = angle_table(3000, dtype=torch.bfloat16)
err = (table.float() - reference).abs().max().item()
print("max error", err)
assert err < 0.05, f"angle table off by {err:.3f}"
"""

# a library's block (diffusers) called inside a float16 autocast region: its conv overflows, its
# norm makes NaN. The line is the call (line 11): the ops the library runs for it are that line's
LIBRARY_UNDER_AUTOCAST = """import torch
from diffusers.models.resnet import ResnetBlock2D

torch.manual_seed(0)
block = ResnetBlock2D(in_channels=4, out_channels=4, temb_channels=None, groups=2).eval()
with torch.no_grad():
    block.conv1.weight.mul_(100000.0)
    x = torch.randn(1, 4, 8, 8) * 30
    with torch.autocast("cpu", dtype=torch.float16):
        h = x * 0.5
        out = block(h, None)
assert torch.isfinite(out).all(), "the block's output holds inf/NaN"
"""

# a module-wide `.half()` also rounds a float32 frequency buffer that the forward reads in float32
# on purpose: the cast line (21) is the root; its fix keeps the float32 buffers through it
BUFFER_CAST = """import torch
from torch import nn

torch.manual_seed(0)


class TimeEmbedding(nn.Module):
    def __init__(self, dim=64):
        super().__init__()
        self.register_buffer("freqs", torch.exp(-torch.arange(dim // 2) * 9.2 / (dim // 2)), persistent=False)
        self.proj = nn.Linear(dim, dim)

    def forward(self, t):
        angles = t[:, None].float() * self.freqs.float()[None]
        return self.proj(torch.cat([angles.cos(), angles.sin()], -1).to(self.proj.weight.dtype))


model = TimeEmbedding()
t = torch.tensor([999.0, 4000.0])
reference = model(t)
model.half()
err = (model(t).float() - reference).abs().max().item()
assert err < 0.05, f"time embedding off by {err:.3f}"
"""


# fp16 scores sharpened in place by a tiny temperature overflow: the division (line 9) is the first
# op that makes inf from finite values, and is the root, though float32 scores upstream (line 4)
# would cure it too; the rebinding keeps the in-place call's result, so `.float()` is its cure
IN_PLACE = """import torch


def scores(q, k):
    return q @ k.t()


def sharpen(s, temp):
    s = s.div_(temp)
    return s.softmax(-1)


torch.manual_seed(0)
q = torch.randn(4, 8, dtype=torch.float16) * 3
k = torch.randn(6, 8, dtype=torch.float16) * 3
p = sharpen(scores(q, k), 1e-4)
assert torch.isfinite(p).all(), "NaN probabilities"
"""

# a float16 running sum `acc += x` overflows: computed in float32, it becomes `acc = acc.float() + (x)`
AUGMENTED = """import torch

acc = torch.zeros(4, dtype=torch.float16)
for _ in range(100):
    acc += torch.full((4,), 1000.0, dtype=torch.float16)
assert torch.isfinite(acc).all(), "the running sum overflowed"
"""


# a float32 program whose precision fails it: positions 6.4e6 m apart by 1 cm, made from Python
# floats by torch.tensor (float32 by default), collapse; no half line: float32 lines tried in float64
DEFAULT_FLOAT32 = """import torch


def to_metres(readings):
    return torch.tensor(readings)


base = 6_371_000.0
pos = to_metres([base + 0.01 * i for i in range(50)])
steps = pos[1:] - pos[:-1]
assert (steps > 0).all(), "steps collapsed"
"""


# a Python float made a tensor while the default dtype is bfloat16 (a "bf16-true" step): rounded
# before a float32 sum ever sees it; the factory that took the default dtype is the root
DEFAULT_BFLOAT16 = """import torch


def as_tensor(v):
    return torch.tensor(v)


total = torch.zeros((), dtype=torch.float32)
torch.set_default_dtype(torch.bfloat16)
for i in range(100):
    total += as_tensor(1.0 + i * 1e-3).float()
torch.set_default_dtype(torch.float32)
assert abs(total.item() - 104.95) < 1e-3, f"logged total {total.item()}"
"""


@pytest.mark.parametrize(
    ("script", "line", "module", "written"),
    [
        (IN_PLACE, 9, None, "s = s.float().div_(temp)"),
        (DEFAULT_BFLOAT16, 5, None, "return torch.tensor(v, dtype=torch.float32)"),
        (DEFAULT_FLOAT32, 5, None, "return torch.tensor(readings, dtype=torch.float64)"),
        (AUGMENTED, 5, None, "acc = acc.float() + (torch.full((4,), 1000.0, dtype=torch.float16))"),
        (DERIVED, 5, None, "torch.arange(x.shape[0], dtype=torch.float32)"),
        (CHOSEN, 10, None, "table = angle_table(3000, dtype=torch.float32)"),
        (
            LIBRARY_UNDER_AUTOCAST,
            11,
            "conv1",  # the block's module that overflows, of those the line ran
            'with torch.autocast(device_type="cpu", enabled=False):\n            out = block',
        ),
        (
            BUFFER_CAST,
            21,
            None,  # the buffers' owner is the model itself
            "_float32_buffers = {n: b for n, b in model.named_buffers() if b.dtype == torch.float32}",
        ),
    ],
    ids=[
        "an-in-place-overflow-is-its-own-root",
        "a-factory-under-a-bfloat16-default-dtype",
        "a-float32-default-in-a-float64-world",
        "an-augmented-sum-in-float32",
        "derived-dtype-not-the-literal-input",
        "dtype-chosen-by-the-caller",
        "a-library-block-under-autocast",
        "a-module-cast-rounds-a-float32-buffer",
    ],
)
def test_the_root_is_the_decision_and_its_fix_cures(
    tmp_path: Path, script: str, line: int, module: str | None, written: str
) -> None:
    (tmp_path / "prog.py").write_text(script)
    proc = dtype_doctor("run", "--budget", "300", "--json=r.json", "prog.py", cwd=tmp_path, env=ENV)
    assert proc.returncode == 1 and "AssertionError" in proc.stderr, proc.stderr[-2000:]
    report = json.loads((tmp_path / "r.json").read_text())
    first = next(f for f in report["findings"] if f["severity"] == "error")
    assert (first["location"]["file"], first["location"]["line"]) == ("prog.py", line), first["message"]
    assert first["location"]["module"] == module, first["location"]
    fix = first["fixes"][0]
    assert fix["verified"] is True, fix["verification"]
    assert any(e["location"]["row"] == line for e in fix["edits"]), fix["edits"]
    fix_by_hand().apply_edits(tmp_path, fix["edits"])
    assert written in (tmp_path / "prog.py").read_text()
    ran = subprocess.run([sys.executable, "prog.py"], cwd=tmp_path, env=ENV, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr[-1500:]


# a float16 sum overflows: the root line itself makes inf from finite values, so the finding names
# the symptom (nonfinite-values), where a wrong-but-finite result is finite-but-wrong
OVERFLOW = """import torch


def total(x):
    return x.sum()


x = torch.full((1000,), 100.0, dtype=torch.float16)
s = total(x)
assert torch.isfinite(s), "the sum overflowed"
"""


@pytest.mark.parametrize(("script", "code"), [(OVERFLOW, "nonfinite-values"), (DERIVED, "finite-but-wrong")])
def test_the_finding_names_a_nonfinite_symptom(tmp_path: Path, script: str, code: str) -> None:
    (tmp_path / "prog.py").write_text(script)
    dtype_doctor("run", "--budget", "300", "--json=r.json", "prog.py", cwd=tmp_path, env=ENV)
    report = json.loads((tmp_path / "r.json").read_text())
    first = next(f for f in report["findings"] if f["severity"] == "error")
    assert first["code"] == code, first["message"]
    assert first["fixes"][0]["verified"] is True


def test_a_failure_precision_does_not_cure_gets_no_root(tmp_path: Path) -> None:
    # no half line, and float64 cures nothing: the experiment names no line
    (tmp_path / "prog.py").write_text(
        "import torch\nx = torch.ones(3) * 2\nassert x.sum() == 7, 'wrong total'\n"
    )
    proc = dtype_doctor("run", "--budget", "300", "--json=r.json", "prog.py", cwd=tmp_path, env=ENV)
    assert proc.returncode == 1 and "wrong total" in proc.stderr
    assert json.loads((tmp_path / "r.json").read_text())["findings"] == []
