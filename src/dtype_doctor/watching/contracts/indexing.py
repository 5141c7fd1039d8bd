"""Index writes and scatters: the written values in the destination's dtype (rule "indexed", whose
integer indices are not operands); `x[idx] = v` only where torch does not cast (rule "setitem")."""

from __future__ import annotations

import torch

from ...catalog.family_codes import INDEX_PUT_DTYPE_MISMATCH
from .core import Contract, Mismatch, Slot, register, rule

T = torch.Tensor
IDX = INDEX_PUT_DTYPE_MISMATCH
# autocast_table says where autocast runs them mixed (CUDA's promote list: index_put, scatter_add; CPU:
# index_copy, measured); in-place ones are not autocast
INDEXED = {"code": IDX, "rule": "indexed", "ref": "destination"}


@rule("setitem")
def _setitem(contract: Contract, slots: list[Slot], context: torch.dtype | None = None) -> Mismatch | None:
    dst = next((s for s in slots if s.role == "destination"), None)
    val = next((s for s in slots if s.role == "value"), None)
    if dst is None or val is None or val.tensor.dtype == dst.tensor.dtype:
        return None
    key = next((s for s in slots if s.role == "index"), None)
    if key is None:
        return None  # basic indexing copies into the destination, casting it
    if key.tensor.dtype == torch.bool and val.tensor.numel() == 1:
        return None  # goes through masked_fill, which casts
    if val.tensor.is_floating_point() and not dst.tensor.is_floating_point():
        # floats written into an integer store (a cache allocated in a quantized weight's int8):
        # the store is the odd one, casting the values to it would truncate them
        return Mismatch(val.tensor.dtype, [dst], contract.code)
    return Mismatch(dst.tensor.dtype, [val], contract.code)


register(
    T.__setitem__,
    op="__setitem__ (x[idx] = v)",
    code=IDX,
    roles={"self": "destination", "key": "index", "value": "value"},
    rule="setitem",
)
register(T.index_put_, roles={"self": "destination", "indices": None, "values": "values"}, **INDEXED)
register(
    T.index_put,
    torch.index_put,
    roles={"input": "destination", "indices": None, "values": "values"},
    **INDEXED,
)
for name in ("index_add_", "index_add", "index_copy_", "index_copy"):
    register(
        getattr(T, name),
        roles={"self": "destination", "dim": None, "index": None, "source": "source"},
        **INDEXED,
    )
register(
    torch.index_add, roles={"input": "destination", "dim": None, "index": None, "source": "source"}, **INDEXED
)
for name in ("scatter_", "scatter", "scatter_add_", "scatter_add", "scatter_reduce_", "scatter_reduce"):
    register(
        getattr(T, name),
        roles={"self": "destination", "dim": None, "index": None, "src": "source"},
        **INDEXED,
    )
for func in (torch.scatter, torch.scatter_add, torch.scatter_reduce):
    register(func, roles={"input": "destination", "dim": None, "index": None, "src": "source"}, **INDEXED)
for name in ("masked_scatter_", "masked_scatter"):
    register(getattr(T, name), roles={"self": "destination", "mask": None, "source": "source"}, **INDEXED)
register(torch.masked_scatter, roles={"input": "destination", "mask": None, "source": "source"}, **INDEXED)
