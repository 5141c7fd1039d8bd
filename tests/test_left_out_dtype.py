"""The decision one step before the failing tensor's birth: a `.to(device)` that left the dtype out (a
tensor's, a model's), `x.new_empty(n)` taking the input's float32 under autocast, a helper's float32
result where the failing function takes it, a factory's `dtype=dtype` whose value was written a line
above, a cast the code has under an `if` that did not run (a move given the function's own dtype
parameter when it has one). `run --write` tries the edit there first; the report's first fix is that
edit, verified by its re-run, and the written script runs. Real torch; every edit made here is
executed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli_process import python, run_write  # type: ignore[import-not-found]
from dtype_doctor.editing import moves
from dtype_doctor.editing.source import Source

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}

MODEL_MOVED = """\
import torch
from torch import nn


def load_projector(device):
    projector = nn.Linear(8, 4)
    projector = projector.to(device)
    return projector


class Pipeline:
    def __init__(self, dtype, device):
        self.dtype, self.device = dtype, device
        self.encoder = nn.Linear(8, 8).to(device, dtype=dtype)
        self.projector = load_projector(device)

    def __call__(self, pixels):
        pixels = pixels.to(self.device, dtype=self.dtype)
        return self.projector(self.encoder(pixels))


pipe = Pipeline(torch.float16, torch.device("cpu"))
with torch.no_grad():
    print(pipe(torch.rand(2, 8)).dtype)
"""

TENSOR_MOVED = """\
import numpy as np
import torch
from torch import nn


def preprocess(images):
    return torch.from_numpy(np.stack(images).astype(np.float32) / 255.0)


def estimate(model, images, device):
    pixels = preprocess(images)
    pixels = pixels.to(device=device)
    return model(pixels)


model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()).to(torch.bfloat16)
images = [np.zeros((3, 8, 8), dtype=np.uint8) for _ in range(2)]
with torch.no_grad():
    print(estimate(model, images, torch.device("cpu")).shape)
"""

INHERITED_BUFFER = """\
import torch
import torch.nn.functional as F
from torch import nn


class TypedLinear(nn.Module):
    def __init__(self, width, types):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(types, width, width) / width**0.5)

    def forward(self, x, kinds):
        out = x.new_zeros(x.size(0), x.size(1))
        for i in range(self.weight.size(0)):
            rows = kinds == i
            out[rows] = F.linear(x[rows], self.weight[i])
        return out


layer = TypedLinear(8, 2)
x, kinds = torch.randn(6, 8), torch.tensor([0, 1, 0, 1, 0, 1])
with torch.autocast("cpu", dtype=torch.bfloat16):
    print(layer(x, kinds).dtype)
"""


HELPER_MASK = """\
import torch
from torch import nn


def padding_mask(lengths, width):
    return (torch.arange(width)[None, :] < lengths[:, None]).float()


class Pool(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x, lengths):
        mask = padding_mask(lengths, x.size(1))
        return self.proj(x * mask[..., None]).sum(1)


model = Pool().half()
x = torch.randn(2, 5, 8, dtype=torch.float16)
with torch.no_grad():
    print(model(x, torch.tensor([3, 5])).dtype)
"""


VALUE_ELSEWHERE = """\
import torch
from torch import nn


class Grid(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        n = x.size(1)
        dtype, device = torch.float32, x.device
        steps = torch.arange(n, dtype=dtype, device=device)
        return self.proj(x + steps[None, :, None])


model = Grid().half()
x = torch.randn(2, 3, 4, dtype=torch.float16)
with torch.no_grad():
    print(model(x).dtype)
"""


SKIPPED_CAST = """\
import torch
from torch import nn


class Runner:
    def __init__(self, model, dtype, device):
        self.model, self.dtype, self.device = model.to(device=device, dtype=dtype), dtype, torch.device(device)

    def prepare(self, batch):
        feats = torch.as_tensor(batch)
        if self.device.type == "cuda":
            feats = feats.to(dtype=self.dtype)
        return feats

    def __call__(self, batch):
        with torch.no_grad():
            return self.model(self.prepare(batch))


runner = Runner(nn.Linear(4, 2), torch.bfloat16, "cpu")
print(runner([[0.5] * 4] * 3).dtype)
"""


DTYPE_PARAMETER = """\
import torch
from torch import nn


def estimate(model, pixels, dtype, device):
    pixels = pixels.to(device=device)
    with torch.autocast("cpu", dtype=dtype, enabled=device.type == "cuda"):
        return model(pixels)


model = nn.Linear(4, 2).to(torch.bfloat16)
with torch.no_grad():
    print(estimate(model, torch.randn(3, 4), torch.bfloat16, torch.device("cpu")).dtype)
"""


def _write(tmp_path: Path, text: str) -> tuple[Path, dict, subprocess.CompletedProcess]:
    return run_write(tmp_path, text, ENV)


# a table a method moves to the sample's device (keeping its float32) and indexes a few lines later
TABLE_MOVED = """\
import torch


class Schedule:
    def __init__(self, steps=50):
        self.scale = torch.linspace(0.9, 0.1, steps)

    def mix(self, sample, noise, t):
        self.scale = self.scale.to(sample.device)
        s = self.scale[t]
        s = s.reshape(-1, 1)
        return s * sample + (1 - s) * noise


proj = torch.nn.Linear(4, 4).half()
sample = torch.randn(2, 4, dtype=torch.float16)
mixed = Schedule().mix(sample, torch.randn_like(sample), torch.tensor([3, 7]))
print(proj(mixed).dtype)
"""


@pytest.mark.parametrize(
    ("text", "line", "written"),
    [
        (MODEL_MOVED, 7, "    projector = projector.to(device, dtype=torch.float16)\n"),
        (TENSOR_MOVED, 12, "    pixels = pixels.to(device=device, dtype=torch.bfloat16)\n"),
        (INHERITED_BUFFER, 12, "        out = x.new_zeros(x.size(0), x.size(1), dtype=torch.bfloat16)\n"),
        (HELPER_MASK, 15, "        mask = padding_mask(lengths, x.size(1)).to(torch.float16)\n"),
        (VALUE_ELSEWHERE, 12, "        dtype, device = torch.float16, x.device\n"),
        (SKIPPED_CAST, 11, "        feats = feats.to(dtype=self.dtype)\n"),
        (DTYPE_PARAMETER, 6, "    pixels = pixels.to(device=device, dtype=dtype)\n"),
        (TABLE_MOVED, 9, "        self.scale = self.scale.to(sample.device, dtype=sample.dtype)\n"),
    ],
    ids=[
        "model-to",
        "tensor-to",
        "new-zeros-autocast",
        "helper-result",
        "value-elsewhere",
        "skipped-cast",
        "own-dtype-parameter",
        "moved-on-the-way-to-its-use",
    ],
)
def test_the_first_fix_is_the_decision_before_the_birth(
    tmp_path: Path, text: str, line: int, written: str
) -> None:
    script, report, proc = _write(tmp_path, text)
    assert proc.returncode == 0, proc.stderr[-3000:]
    first = report["findings"][0]["fixes"][0]
    assert f"script.py:{line}" in first["title"], first["title"]
    assert first["verified"] is True
    after = script.read_text()
    assert after.splitlines(keepends=True)[line - 1] == written
    ran = python([sys.executable, script.name], cwd=tmp_path, env=ENV, timeout=300)
    assert ran.returncode == 0, ran.stderr[-2000:]


def test_a_move_names_a_device_and_no_dtype() -> None:
    src = Source(
        "m.py",
        "y = x.to('cuda')\ny = x.to(dev, torch.half)\ny = x.to(x.device)\n"
        "y = x.to(dtype=d)\ny = x.to(**kw)\ny = x.to(other)\ny = x.to(device=d, non_blocking=True)\n",
    )
    found = [c.lineno for c in moves.moves(src, "x", 0, after=True)]
    assert found == [1, 3, 7]


def test_the_way_back_from_a_use_follows_assignments_in_its_function() -> None:
    src = Source(
        "m.py",
        "def f(self, t, x):\n    a = self.table[t]\n    b = a * 2\n    unrelated = 3\n    return b + x\n",
    )
    assert moves.read_back(src, 5) == ["b", "x", "a", "self.table", "t"]
