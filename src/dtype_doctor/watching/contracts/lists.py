"""cat/stack and friends: a list of tensors that promotes silently (rule "list", which decides the
call itself: autocast promotes on purpose, and a library's own promotion is only counted)."""

from __future__ import annotations

import torch

from ...catalog.family_codes import AUTOCAST_HALF_CONFLICT, SILENT_PROMOTION
from .core import LOW_DTYPES, Contract, Mismatch, Scene, Slot, floating, register, rule


@rule("list", owns_call=True)
def _list(contract: Contract, slots: list[Slot], scene: Scene) -> Mismatch | None:
    fl = floating(slots)
    if not fl:
        return None
    autocast_dtype = scene.autocast(fl[0].tensor.device.type)
    if autocast_dtype is not None:
        # autocast promotes float32 with its own dtype, but a half of the other kind fails in its
        # prioritize
        bad = [s for s in fl if s.tensor.dtype in LOW_DTYPES and s.tensor.dtype != autocast_dtype]
        return Mismatch(autocast_dtype, bad, AUTOCAST_HALF_CONFLICT) if bad else None
    dtypes = {s.tensor.dtype for s in fl}
    low = [s.tensor.dtype for s in fl if s.tensor.dtype in LOW_DTYPES]
    if len(dtypes) < 2 or not low:
        return None  # one dtype, or float32 with float64: no precision is lost to a half
    context = scene.module_dtype()
    expected = context if context is not None and context in dtypes else low[0]
    m = Mismatch(expected, [s for s in fl if s.tensor.dtype != expected], contract.code)
    return m if scene.in_user_code() else None


for func in (
    torch.cat,
    torch.concat,
    torch.concatenate,
    torch.stack,
    torch.hstack,
    torch.vstack,
    torch.dstack,
):
    register(
        func, op=f"torch.{func.__name__}", code=SILENT_PROMOTION, roles={"tensors": "tensors"}, rule="list"
    )
