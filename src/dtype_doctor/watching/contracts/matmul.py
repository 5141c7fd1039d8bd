"""Matrix products: every operand in one dtype, the weight's where the op has one (rule "same")."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ...catalog.family_codes import MATMUL_DTYPE_MISMATCH
from .core import register

T = torch.Tensor
MM = MATMUL_DTYPE_MISMATCH
# where autocast runs each op with mixed operands comes from autocast_table (measured on CPU: einsum
# reaches bmm and runs low there, cdist runs in float32, mv and dot raise; CUDA: torch's lists)
CAST = {"code": MM}
LINEAR = {"input": "input", "weight": "weight", "bias": "bias"}

register(F.linear, op="F.linear", roles=LINEAR, ref="weight", module_op=True, **CAST)
register(
    torch.addmm, T.addmm, roles={"input": "bias", "mat1": "input", "mat2": "weight"}, ref="weight", **CAST
)
register(torch.mm, T.mm, roles={"input": "input", "mat2": "other"}, **CAST)
register(torch.matmul, T.matmul, T.__matmul__, roles={"input": "input", "other": "other"}, **CAST)
register(T.__rmatmul__, roles={"self": "other", "other": "input"}, **CAST)
register(torch.bmm, T.bmm, roles={"input": "input", "mat2": "other"}, **CAST)
register(torch.baddbmm, T.baddbmm, roles={"input": "bias", "batch1": "batch1", "batch2": "batch2"}, **CAST)
register(torch.einsum, roles={"equation": None}, varargs=True, **CAST)
register(torch.dot, T.dot, torch.inner, T.inner, roles={"input": "input", "tensor": "other"}, **CAST)
# ops whose meta kernels skip the dtype check their CPU/CUDA kernels make (probed on torch 2.13)
register(torch.mv, T.mv, roles={"input": "input", "vec": "other"}, **CAST)
register(torch.addmv, T.addmv, roles={"input": "bias", "mat": "input", "vec": "other"}, **CAST)
register(torch.cdist, roles={"x1": "input", "x2": "other"}, **CAST)
