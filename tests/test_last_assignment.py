"""A value float32 on purpose (a `.float()` residual stream, a table built with `dtype=torch.float32`,
a dequantised weight) that meets half weights: the cast goes where the failing function last assigned
the value (or, for a helper's result inside an expression, around that call), not at its birth,
which would lower the user's float32 maths, nor a whole model made float32. `run --write` writes
that edit, the report's first fix is it, verified by its re-run, and the written script runs. Real
torch; every edit made here is executed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli_process import python, run_write  # type: ignore[import-not-found]

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}

# a helper flattens the activation and reads its dtype for the adapter: a cast at the use comes too late
FLOAT_STREAM = """\
import torch
from torch import nn


def project(h, weight, adapter):
    if h.dim() == 3:
        h = h.reshape(-1, h.shape[-1])
    dtype = h.dtype
    out = torch.matmul(h, weight.t())
    return out + h @ adapter.to(dtype)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(8, 8, dtype=torch.float16))
        self.adapter = nn.Parameter(torch.zeros(8, 8))

    def forward(self, x):
        h = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)
        return project(h, self.weight, self.adapter)


block = Block()
with torch.no_grad():
    print(block(torch.randn(2, 3, 8, dtype=torch.float16)).dtype)
"""

# a positional table computed in float32 on purpose, read into a float16 sum in the caller
FLOAT_TABLE = """\
import math

import torch
from torch import nn


def sinusoids(n, dim):
    freqs = torch.exp(torch.arange(dim // 2, dtype=torch.float32) * -(math.log(10000.0) / (dim // 2)))
    angles = torch.arange(n, dtype=torch.float32)[:, None] * freqs[None, :]
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


class Embeddings(nn.Module):
    def __init__(self, vocab, dim):
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim)
        self.table = sinusoids(64, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, ids):
        embeds = self.tokens(ids)
        positions = self.table[: ids.shape[1]]
        return self.norm(embeds + positions)


model = Embeddings(32, 16).half()
with torch.no_grad():
    print(model(torch.randint(0, 32, (2, 5))).dtype)
"""

# a dequantised weight in its float32 scale's dtype, used inside the failing expression
DEQUANTISED = """\
import torch
from torch import nn


class QuantLinear(nn.Module):
    def __init__(self, weight, compute_dtype):
        super().__init__()
        self.scale = weight.abs().amax(dim=1, keepdim=True).float() / 127
        self.q = torch.round(weight.float() / self.scale).to(torch.int8)
        self.compute_dtype = compute_dtype

    def weight_estimate(self):
        return self.q.float() * self.scale

    def forward(self, x):
        return torch.matmul(x, self.weight_estimate().t())


layer = QuantLinear(torch.randn(4, 8), torch.bfloat16)
with torch.no_grad():
    print(layer(torch.randn(2, 8, dtype=torch.bfloat16)).dtype)
"""

# (script, the line's text before, after): that line is the only one the fix changes
CASES = [
    pytest.param(
        FLOAT_STREAM,
        "h.reshape(-1, h.shape[-1])",
        "h.reshape(-1, h.shape[-1]).to(torch.float16)",
        id="float32-stream",
    ),
    pytest.param(
        FLOAT_TABLE,
        "self.table[: ids.shape[1]]",
        "self.table[: ids.shape[1]].to(torch.float16)",
        id="float32-table",
    ),
    pytest.param(
        DEQUANTISED,
        "self.weight_estimate().t()",
        "self.weight_estimate().to(torch.bfloat16).t()",
        id="dequantised",
    ),
]


def _write(tmp_path: Path, text: str) -> tuple[Path, dict, subprocess.CompletedProcess]:
    return run_write(tmp_path, text, ENV)


@pytest.mark.parametrize(("text", "before", "written"), CASES)
def test_a_deliberate_float32_value_is_cast_where_the_failing_code_takes_it(
    tmp_path: Path, text: str, before: str, written: str
) -> None:
    line = next(n for n, t in enumerate(text.splitlines(), 1) if before in t)
    script, report, proc = _write(tmp_path, text)
    assert proc.returncode == 0, proc.stderr[-3000:]
    first = report["findings"][0]["fixes"][0]
    assert f"script.py:{line}" in first["title"], first["title"]
    assert first["verified"] is True
    assert [e["location"]["row"] for e in first["edits"]] == [line]
    after = script.read_text().splitlines()
    assert written in after[line - 1], after[line - 1]
    assert len(after) == len(text.splitlines())  # the value's own line, no line added
    ran = python([sys.executable, script.name], cwd=tmp_path, env=ENV, timeout=300)
    assert ran.returncode == 0, ran.stderr[-2000:]
