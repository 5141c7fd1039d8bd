"""The float32 re-run of a module draws the random numbers the real call drew, NumPy's and Python's
too (a speech encoder's time masking draws from NumPy's global generator): a bfloat16 module that
masks at random is not "finite but wrong", and the user's own streams go on as without the tool."""

from __future__ import annotations

import random

import numpy as np
import torch
from torch import nn

import dtype_doctor as dd


class _TimeMasked(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        keep = np.random.rand(x.shape[1]) > 0.5
        shift = random.random()
        x = x * torch.from_numpy(keep).to(x.dtype)[None, :, None]
        return self.proj(x) + shift


def _draws(watched: bool) -> tuple[list, float, float, float]:
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    model = _TimeMasked().to(torch.bfloat16)
    x = torch.randn(2, 32, 16, dtype=torch.bfloat16)
    if watched:
        with dd.watch(model, numerics=True) as session:
            model(x)
        findings = [f.code for f in session.report.findings]
    else:
        model(x)
        findings = []
    return findings, np.random.rand(), random.random(), torch.rand(1).item()


def test_a_module_masking_with_numpy_is_compared_with_the_same_mask_and_the_streams_go_on() -> None:
    findings, *after_watched = _draws(watched=True)
    _, *after_plain = _draws(watched=False)
    assert "finite-but-wrong" not in findings, findings
    assert after_watched == after_plain
