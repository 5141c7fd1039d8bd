"""Attention: query, key and value in one dtype; a mask boolean, float32 or the query's (rule "attention");
and, when the user restricted SDPA's backends (`sdpa_kernel`), a backend that takes their dtype."""

from __future__ import annotations

from collections.abc import Collection

import torch
import torch.nn.functional as F

from ...catalog.family_codes import ATTENTION_DTYPE_MISMATCH, FLASH_ATTENTION_DTYPE
from .core import Contract, Mismatch, Slot, pick, register, rule

_HALVES = frozenset({torch.float16, torch.bfloat16})
# the dtypes each fused SDPA backend's kernel-selection check accepts, per device type (torch's
# sdp_utils check_tensor_dtype); "math" takes every floating dtype; a backend a device lacks is absent
SDPA_BACKEND_DTYPES: dict[str, dict[str, frozenset[torch.dtype]]] = {
    "cuda": {
        "flash": _HALVES,
        "efficient": _HALVES | {torch.float32},
        "cudnn": _HALVES,
    },
    "cpu": {"flash": _HALVES | {torch.float32, torch.float64}},
}
_FLAGS = {
    "flash": "flash_sdp_enabled",
    "efficient": "mem_efficient_sdp_enabled",
    "cudnn": "cudnn_sdp_enabled",
    "math": "math_sdp_enabled",
}


def enabled_sdpa_backends() -> frozenset[str]:
    """The SDPA backends torch may pick now (`sdpa_kernel` and `torch.backends.cuda.enable_*_sdp` set them)."""
    on = set()
    for name, flag in _FLAGS.items():
        read = getattr(torch.backends.cuda, flag, None)
        if read is None or read():
            on.add(name)
    return frozenset(on)


def sdpa_refusal(device_type: str, dtype: torch.dtype, enabled: Collection[str]) -> torch.dtype | None:
    """The dtype to cast query/key/value to when every enabled backend that this device has refuses
    `dtype` ("No available kernel"); None when one takes it, or when none runs here whatever the dtype."""
    if "math" in enabled or not dtype.is_floating_point:
        return None
    backends = SDPA_BACKEND_DTYPES.get(device_type, {})
    offered = [accepts for name, accepts in backends.items() if name in enabled]
    if not offered or any(dtype in accepts for accepts in offered):
        return None
    accepted = frozenset().union(*offered)
    return torch.bfloat16 if torch.bfloat16 in accepted else sorted(accepted, key=str)[0]


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
    device = qkv[0].tensor.device.type
    if device in SDPA_BACKEND_DTYPES:
        wanted = sdpa_refusal(device, q, enabled_sdpa_backends())
        if wanted is not None:
            return Mismatch(wanted, qkv, FLASH_ATTENTION_DTYPE, {"sdpa-backend"})
    return None


register(
    F.scaled_dot_product_attention,
    code=ATTENTION_DTYPE_MISMATCH,
    roles={"query": "query", "key": "key", "value": "value", "attn_mask": "mask"},
    rule="attention",
)
