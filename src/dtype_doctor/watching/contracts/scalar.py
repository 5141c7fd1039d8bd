"""Ops that raise PyTorch's generic "expected scalar type" error: lerp's operands in one dtype,
embedding's indices integral (rule "indices"), embedding_bag's per-sample weights in the weight's."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ...catalog.family_codes import SCALAR_TYPE_MISMATCH
from .core import Contract, Mismatch, Slot, register, rule

T = torch.Tensor
SCALAR = SCALAR_TYPE_MISMATCH


@rule("indices")
def _indices(contract: Contract, slots: list[Slot], context: torch.dtype | None) -> Mismatch | None:
    idx = next((s for s in slots if s.role == "indices"), None)
    if idx is not None and idx.tensor.dtype not in (torch.int64, torch.int32):
        return Mismatch(torch.int64, [idx], contract.code)
    return None


register(
    torch.lerp,
    T.lerp,
    T.lerp_,
    code=SCALAR,
    roles={"input": "start", "end": "end", "weight": "weight"},
    ref="start",
)
# its meta kernel skips the dtype check the CPU/CUDA kernels make (probed on torch 2.13)
register(torch.cross, T.cross, code=SCALAR, roles={"input": "input", "other": "other"})
register(
    F.embedding, code=SCALAR, roles={"input": "indices", "weight": "weight"}, rule="indices", module_op=True
)
register(
    F.embedding_bag,
    code=SCALAR,
    roles={
        "input": None,
        "weight": "weight",
        "offsets": None,
        "max_norm": None,
        "norm_type": None,
        "scale_grad_by_freq": None,
        "mode": None,
        "sparse": None,
        "per_sample_weights": "per_sample_weights",
    },
    ref="weight",
    module_op=True,
)
