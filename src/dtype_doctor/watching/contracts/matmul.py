"""Matrix products: every operand in one dtype, the weight's where the op has one (rule "same")."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..autocast_table import LOW
from .core import ANY_POLICY, register

T = torch.Tensor
MM = "matmul-dtype-mismatch"

register(
    F.linear,
    op="F.linear",
    code=MM,
    roles={"input": "input", "weight": "weight", "bias": "bias"},
    ref="weight",
    autocast=LOW,
    module_op=True,
)
register(
    torch.addmm,
    T.addmm,
    code=MM,
    roles={"input": "bias", "mat1": "input", "mat2": "weight"},
    ref="weight",
    autocast=LOW,
)
register(torch.mm, T.mm, code=MM, roles={"input": "input", "mat2": "other"}, autocast=LOW)
register(
    torch.matmul, T.matmul, T.__matmul__, code=MM, roles={"input": "input", "other": "other"}, autocast=LOW
)
register(T.__rmatmul__, code=MM, roles={"self": "other", "other": "input"}, autocast=LOW)
register(torch.bmm, T.bmm, code=MM, roles={"input": "input", "mat2": "other"}, autocast=LOW)
register(
    torch.baddbmm,
    T.baddbmm,
    code=MM,
    roles={"input": "bias", "batch1": "batch1", "batch2": "batch2"},
    autocast=LOW,
)
register(torch.dot, T.dot, torch.inner, T.inner, code=MM, roles={"input": "input", "tensor": "other"})
register(torch.einsum, code=MM, roles={"equation": None}, varargs=True, autocast=LOW)

# ops whose meta kernels skip the dtype check their CPU/CUDA kernels make (probed on torch 2.13)
register(torch.mv, T.mv, code=MM, roles={"input": "input", "vec": "other"}, autocast=ANY_POLICY)
register(
    torch.addmv,
    T.addmv,
    code=MM,
    roles={"input": "bias", "mat": "input", "vec": "other"},
    autocast=ANY_POLICY,
)
register(torch.cdist, code=MM, roles={"x1": "input", "x2": "other"}, autocast=ANY_POLICY)
