"""Matrix products: every operand in one dtype, the weight's where the op has one (rule "same")."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ...catalog.family_codes import MATMUL_DTYPE_MISMATCH
from ..autocast_table import LOW, PROMOTE
from .core import ANY_POLICY, register

T = torch.Tensor
MM = MATMUL_DTYPE_MISMATCH
CAST_LOW = {"code": MM, "autocast": LOW}  # autocast runs these in its low dtype on every device
LINEAR = {"input": "input", "weight": "weight", "bias": "bias"}

register(F.linear, op="F.linear", roles=LINEAR, ref="weight", module_op=True, **CAST_LOW)
register(
    torch.addmm, T.addmm, roles={"input": "bias", "mat1": "input", "mat2": "weight"}, ref="weight", **CAST_LOW
)
register(torch.mm, T.mm, roles={"input": "input", "mat2": "other"}, **CAST_LOW)
register(torch.matmul, T.matmul, T.__matmul__, roles={"input": "input", "other": "other"}, **CAST_LOW)
register(T.__rmatmul__, roles={"self": "other", "other": "input"}, **CAST_LOW)
register(torch.bmm, T.bmm, roles={"input": "input", "mat2": "other"}, **CAST_LOW)
register(
    torch.baddbmm, T.baddbmm, roles={"input": "bias", "batch1": "batch1", "batch2": "batch2"}, **CAST_LOW
)
register(torch.einsum, roles={"equation": None}, varargs=True, **CAST_LOW)
# CUDA autocast promotes dot to the widest operand dtype: no mismatch there
register(
    torch.dot,
    T.dot,
    torch.inner,
    T.inner,
    code=MM,
    roles={"input": "input", "tensor": "other"},
    autocast=PROMOTE,
)

# ops whose meta kernels skip the dtype check their CPU/CUDA kernels make (probed on torch 2.13)
CAST_ANY = {"code": MM, "autocast": ANY_POLICY}
register(torch.mv, T.mv, roles={"input": "input", "vec": "other"}, **CAST_ANY)
register(torch.addmv, T.addmv, roles={"input": "bias", "mat": "input", "vec": "other"}, **CAST_ANY)
register(torch.cdist, roles={"x1": "input", "x2": "other"}, **CAST_ANY)
