"""Everyday ways a tensor gets the wrong dtype, each run for real under watch and explained from text."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import dtype_doctor as dd

H = torch.float16


def _watch_failure(model, call):
    with pytest.raises(RuntimeError) as err, dd.watch(model=model) as session:
        call()
    errors = session.report.errors
    assert errors, session.report.findings
    return err.value, errors[0], session.report


def _roles(finding):
    return {o.role: o for o in finding.operands}


def test_numpy_float64_into_a_float32_model_names_the_input_and_the_numpy_fix():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    batch = np.random.rand(3, 4)  # float64, as NumPy makes it
    exc, finding, _ = _watch_failure(model, lambda: model(torch.from_numpy(batch)))
    assert "Double and Float" in str(exc)
    assert (finding.code, finding.location.module) == ("matmul-dtype-mismatch", "0")
    assert _roles(finding)["input"].dtype == "float64"
    assert _roles(finding)["input"].origin.kind == "input"
    assert "from_numpy(batch).to(torch.float32)" in finding.fixes[0].snippet  # made float32 where it is born
    explained = dd.explain(str(exc)).findings[0]
    assert explained.code == "matmul-dtype-mismatch"
    assert "float64" in explained.fixes[0].title


class LoRALinear(nn.Module):
    def __init__(self, base: nn.Linear, rank: int = 2) -> None:
        super().__init__()
        self.base = base
        self.lora_A = nn.Linear(base.in_features, rank, bias=False)  # default dtype: float32
        self.lora_B = nn.Linear(rank, base.out_features, bias=False)

    def forward(self, x):
        return self.base(x) + self.lora_B(self.lora_A(x))


def test_lora_adapter_added_in_float32_to_a_half_model_names_the_adapter_weight():
    model = nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 8)).half()
    model[0] = LoRALinear(model[0])
    _, finding, _ = _watch_failure(model, lambda: model(torch.randn(2, 8, dtype=H)))
    assert (finding.code, finding.location.module) == ("matmul-dtype-mismatch", "0.lora_A")
    weight = _roles(finding)["weight"]
    assert (weight.dtype, weight.origin.kind, weight.origin.name) == (
        "float32",
        "parameter",
        "0.lora_A.weight",
    )


class Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.register_buffer("scale", torch.ones(8))

    def forward(self, x):
        return self.proj(x * self.scale)


def test_float32_buffer_set_after_half_is_the_silent_promotion_before_the_failure():
    model = Scaled().half()
    model.scale = torch.ones(8)  # reassigned after .half(): float32 again
    _, finding, report = _watch_failure(model, lambda: model(torch.randn(2, 8, dtype=H)))
    assert (finding.code, finding.location.module) == ("matmul-dtype-mismatch", "proj")
    assert _roles(finding)["input"].origin.kind == "promotion"
    promotion = next(f for f in report.findings if f.code == "silent-promotion")
    origins = {o.origin.kind: o.origin.name for o in promotion.operands if o.origin}
    assert origins.get("buffer") == "scale"


class Upcast(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x):
        h = self.a(x).float().softmax(-1)  # the upcast that never comes back down
        return self.b(h)


def test_a_float_call_in_forward_is_the_origin_with_its_line():
    model = Upcast().half()
    _, finding, _ = _watch_failure(model, lambda: model(torch.randn(2, 8, dtype=H)))
    origin = _roles(finding)["input"].origin
    assert finding.location.module == "b"
    assert (origin.kind, origin.op) == ("cast", "Tensor.float")
    assert origin.file.endswith("test_real_patterns.py")
    assert "self.a(x).float()" in Path(__file__).read_text().splitlines()[origin.line - 1]


def test_bfloat16_model_fed_float16_names_both_half_dtypes():
    model = nn.Linear(4, 4).to(torch.bfloat16)
    exc, finding, _ = _watch_failure(model, lambda: model(torch.randn(2, 4, dtype=H)))
    assert "Half and BFloat16" in str(exc)
    assert (_roles(finding)["input"].dtype, _roles(finding)["weight"].dtype) == ("float16", "bfloat16")


def test_integer_input_is_not_told_to_use_autocast():
    report = dd.check(nn.Linear(4, 4).half(), ("2x4", "int64"))
    finding = report.errors[0]
    assert _roles(finding)["input"].dtype == "int64"
    assert "autocast" not in finding.fixes[0].title.lower()
