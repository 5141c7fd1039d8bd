"""A silent promotion the statement casts back to its low operand's dtype is told (info), not blamed
(watching/cast_back.py); one that leaks its float32 result stays a warning."""

from __future__ import annotations

import torch
from torch import nn

import dtype_doctor


class Residual(nn.Module):
    def __init__(self, cast_back: bool) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4).half()
        self.extra = nn.Linear(4, 4)  # float32 on purpose
        self.cast_back = cast_back

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.proj(x)
        if self.cast_back:
            return (out + self.extra(x.float())).to(out.dtype)
        return out + self.extra(x.float())


def _promotions(cast_back: bool) -> list:
    model = Residual(cast_back)
    with dtype_doctor.watch(model) as session:
        model(torch.randn(2, 4, dtype=torch.float16))
    return [f for f in session.report.findings if f.code == "silent-promotion"]


def test_a_promotion_cast_back_in_its_statement_is_info():
    (finding,) = _promotions(cast_back=True)
    assert finding.severity.value == "info"
    assert "casts the result back to float16" in finding.message
    assert finding.data["cast_back"].endswith("test_cast_back.py:22")


def test_a_promotion_that_leaks_float32_stays_a_warning():
    (finding,) = _promotions(cast_back=False)
    assert finding.severity.value in ("warning", "error")
    assert "cast_back" not in finding.data
