"""repair/keep.py: the one keep-in-fp32 engine (numerics' keep_in_fp32, compare's "+keep" rows, to_precision)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dtype_doctor import to_precision
from dtype_doctor.errors import DoctorError
from dtype_doctor.repair.keep import keep_in_fp32


class Seen(nn.Module):
    """Records the dtype of what reaches it."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.got: list[torch.dtype] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.got.append(x.dtype)
        return self.lin(x)


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4), Seen())


def test_cast_back_returns_the_input_dtype_and_remove_restores_the_module():
    model = _model().half()
    with keep_in_fp32(model, ["LayerNorm"]) as handle:
        assert handle.paths == ["1"] and model[1].weight.dtype == torch.float32
        out = model(torch.randn(2, 4).half())
        assert out.dtype == torch.float16 and model[2].got == [torch.float16]
    assert model[1].weight.dtype == torch.float16 and "forward" not in model[1].__dict__


def test_fp32_out_keeps_float32_between_modules_and_casts_where_a_low_module_takes_it():
    model = _model().half()
    handle = keep_in_fp32(model, ["1"], strategy="fp32-out")
    assert model(torch.randn(2, 4).half()).dtype == torch.float16
    # the kept LayerNorm's fp32 output passes Seen (no parameters of its own); its Linear casts it
    assert model[2].got == [torch.float32] and model[2].lin._forward_pre_hooks
    assert model[1](torch.randn(2, 4).half()).dtype == torch.float32
    handle.remove()
    assert not model[2].lin._forward_pre_hooks


def test_cast_back_to_a_fixed_dtype_and_fp32_weights_reloaded():
    fp32 = _model()
    state = {k: v.clone() for k, v in fp32.state_dict().items()}
    model = _model().half()
    keep_in_fp32(model, ["1"], out_dtype=torch.bfloat16, fp32_state=state)
    assert torch.equal(model[1].weight, state["1.weight"])  # not rounded through float16
    assert model[1](torch.randn(2, 4).half()).dtype == torch.bfloat16


def test_autocast_is_off_inside_a_kept_module():
    model = _model()
    keep_in_fp32(model, ["0"], strategy="fp32-out")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert model[0](torch.randn(2, 4)).dtype == torch.float32
        assert model[2].lin(torch.randn(2, 4)).dtype == torch.bfloat16


def test_to_precision_is_the_engine_with_compares_strategies():
    x = torch.randn(2, 4)
    for strategy in ("fp32-out", "cast-back"):
        model = to_precision(_model(), torch.float16, keep_fp32=["norm"], strategy=strategy)
        assert model[0].weight.dtype == torch.float16 and model[1].weight.dtype == torch.float32
        assert model(x.half()).dtype == torch.float16
    model = to_precision(_model(), torch.bfloat16, keep_fp32=["0"], autocast=True, strategy="cast-back")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert model[0](x).dtype == torch.float32  # under autocast kept outputs stay fp32
    with pytest.raises(ValueError, match="strategy"):
        to_precision(_model(), torch.float16, keep_fp32=["0"], strategy="fp32")
    with pytest.raises(DoctorError, match="no module matches"):
        keep_in_fp32(_model(), ["attention"])
