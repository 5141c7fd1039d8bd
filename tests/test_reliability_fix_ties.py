"""issue 13, item 4: fix() with tied weights and with dynamic-quantized modules leaves a model
that runs, and its plan names every module it kept in fp32 and why."""

from __future__ import annotations

import logging
import warnings

import pytest
import torch
from torch import nn

import dtype_doctor
import tiny_models


class TiedLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(16, 8)
        self.body = nn.Linear(8, 8)
        self.head = nn.Linear(8, 16, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(self.embed(ids)))


def test_keeping_a_tied_head_keeps_its_embedding_with_its_own_border_casts(caplog):
    model = TiedLM()
    with caplog.at_level(logging.WARNING, logger="dtype_doctor"):
        dtype_doctor.fix(model, torch.float16, keep_fp32=("head",))
    plan = model._dtype_doctor_fix
    # before: the plan said ['head'] while the shared weight made 'embed' fp32 too, and the
    # forward failed with "mat1 and mat2 must have the same dtype, but got Float and Half"
    assert plan.kept == ["head", "embed"]
    assert plan.notes == [
        "'head.weight' is tied to 'embed.weight': 'embed' is kept in fp32 too, with its own border casts"
    ]
    assert "tied to 'embed.weight'" in caplog.text
    assert model.embed.weight is model.head.weight and model.head.weight.dtype == torch.float32
    assert model.body.weight.dtype == torch.float16
    out = model(torch.tensor([[1, 2, 3]]))
    assert out.dtype == torch.float16 and torch.isfinite(out).all()


def test_gpt2_with_its_tied_lm_head_kept_in_fp32_still_runs():
    model = tiny_models.gpt2(n_layer=1).eval()
    assert model.lm_head.weight is model.transformer.wte.weight
    dtype_doctor.fix(model, torch.float16, keep_fp32=("lm_head",))
    plan = model._dtype_doctor_fix
    assert "lm_head" in plan.kept and "transformer.wte" in plan.kept
    assert any("'lm_head.weight' is tied to 'transformer.wte.weight'" in n for n in plan.notes)
    with torch.no_grad():
        logits = model(torch.tensor([[1, 2, 3, 4]])).logits
    assert logits.dtype == torch.float16 and logits.shape == (1, 4, 128)


@pytest.fixture
def quantized() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4), nn.LayerNorm(4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization's deprecation notice
        return torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)


def test_a_dynamic_quantized_model_runs_after_fix_and_the_plan_says_why(quantized):
    x = torch.randn(2, 8)
    with torch.no_grad():
        before = quantized(x)
    dtype_doctor.fix(quantized, torch.float16)
    plan = quantized._dtype_doctor_fix
    # before: RuntimeError: expected scalar type Float but found Half
    with torch.no_grad():
        after = quantized(x)
    assert after.dtype == torch.float16
    torch.testing.assert_close(after.float(), before, atol=2e-2, rtol=2e-2)
    assert plan.kept == ["0", "2"]  # nothing else kept by default (issue 22: keep_fp32=() unless asked)
    assert "'0' is quantized: left as it is and fed float32" in plan.notes
    assert "'2' is quantized: left as it is and fed float32" in plan.notes
