"""Attention: query, key and value in one dtype; a mask boolean, float32 or the query's (rule "attention")."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ...catalog.family_codes import ATTENTION_DTYPE_MISMATCH
from .core import Contract, Mismatch, Slot, pick, register, rule


@rule("attention")
def _attention(contract: Contract, slots: list[Slot], context: torch.dtype | None) -> Mismatch | None:
    qkv = [s for s in slots if s.role in ("query", "key", "value")]
    if not qkv:
        return None
    q = qkv[0].tensor.dtype
    if any(s.tensor.dtype != q for s in qkv):
        expected = pick(qkv, None, context)
        return Mismatch(expected, [s for s in qkv if s.tensor.dtype != expected], contract.code)
    mask = next((s for s in slots if s.role == "mask"), None)
    if mask is not None and mask.tensor.dtype not in (torch.bool, torch.float32, q):
        return Mismatch(q, [mask], contract.code)
    return None


register(
    F.scaled_dot_product_attention,
    code=ATTENTION_DTYPE_MISMATCH,
    roles={"query": "query", "key": "key", "value": "value", "attn_mask": "mask"},
    rule="attention",
)
