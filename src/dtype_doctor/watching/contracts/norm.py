"""Normalisations: the op's own parameters in one dtype, the input in theirs or lower (rule "norm")."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ...catalog.family_codes import NORM_DTYPE_MISMATCH
from .core import LOW_DTYPES, Contract, Mismatch, Slot, register, rule

NORM = NORM_DTYPE_MISMATCH


@rule("norm")
def _norm(contract: Contract, slots: list[Slot], context: torch.dtype | None = None) -> Mismatch | None:
    inp = next((s for s in slots if s.role == "input"), None)
    params = [s for s in slots if s.role in ("weight", "bias") and s.tensor.is_floating_point()]
    if inp is None or not params:
        return None
    pdt = params[0].tensor.dtype
    odd = [s for s in params if s.tensor.dtype != pdt]
    if odd:
        return Mismatch(pdt, odd, contract.code)
    if not inp.tensor.is_floating_point():  # an integer/bool/complex input to a floating norm
        return Mismatch(pdt, [inp], contract.code)
    x = inp.tensor.dtype
    # CPU and CUDA accept a reduced-precision input with float32 parameters, not the reverse
    if x == pdt or (pdt == torch.float32 and x in LOW_DTYPES):
        return None
    return Mismatch(pdt, [inp], contract.code)


# autocast_table: CUDA autocast runs these in float32; CPU autocast leaves them alone (measured)
AFFINE = {"weight": "weight", "bias": "bias"}
NORM_OP = {"code": NORM, "rule": "norm", "module_op": True}
register(F.layer_norm, roles={"input": "input", "normalized_shape": None, **AFFINE}, **NORM_OP)
register(F.group_norm, roles={"input": "input", "num_groups": None, **AFFINE}, **NORM_OP)
if hasattr(F, "rms_norm"):
    register(
        F.rms_norm,
        roles={"input": "input", "normalized_shape": None, "weight": "weight"},
        **NORM_OP,
    )
RUNNING = {"input": "input", "running_mean": None, "running_var": None, **AFFINE}
register(F.batch_norm, roles=RUNNING, **NORM_OP)
register(F.instance_norm, roles=RUNNING, **NORM_OP)
