"""CUDA autocast, for real, against `check`'s emulation of it on meta: check predicts a failure
exactly when the real CUDA run fails, and names the same op family."""

from __future__ import annotations

import pytest
import torch
from torch import nn

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device (tests/gpu runs on a GPU machine)", allow_module_level=True)

from dtype_doctor import check


class Clean(nn.Module):
    """Linear, conv, norms, softmax, matmul: autocast casts every operand itself."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.GroupNorm(2, 8)
        self.lin = nn.Linear(8, 8)
        self.ln = nn.LayerNorm(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.conv(x)).mean((2, 3))
        h = self.ln(self.lin(h))
        return torch.softmax(h @ h.t(), -1)


class IndexPut(nn.Module):
    """A float32 buffer filled with a Linear's float16 output: autocast does not cast index_put_."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(4, 8, device=x.device)
        out[torch.tensor([0, 2], device=x.device)] = self.lin(x)
        return out


CASES = [
    (Clean, "2x3x8x8:float32", None),
    (IndexPut, "2x8:float32", "index-put-dtype-mismatch"),
]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize(("build", "spec", "code"), CASES, ids=[c[0].__name__ for c in CASES])
def test_check_predicts_what_cuda_autocast_does(build, spec, code, dtype):
    if dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bfloat16")
    torch.manual_seed(0)
    model = build().cuda()
    shape, _, _ = spec.partition(":")
    x = torch.randn(*[int(n) for n in shape.split("x")], device="cuda")
    real_error = None
    with torch.autocast("cuda", dtype=dtype):
        try:
            model(x)
        except RuntimeError as exc:
            real_error = str(exc)
    predicted = check(model, spec, dtype=None, autocast=dtype)
    errors = [f.code for f in predicted.errors]
    if code is None:
        assert real_error is None and errors == []
    else:
        assert real_error is not None, "the case must fail on CUDA for the comparison to mean anything"
        assert errors == [code], f"real CUDA error: {real_error}"
