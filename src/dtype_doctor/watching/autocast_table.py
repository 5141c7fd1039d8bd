"""What autocast does to each op, per device type and autocast dtype: the one table `watch`'s contracts
and `check`'s emulation read.

LOW: the floating operands are cast to the autocast dtype. FP32: cast to float32. PROMOTE: cast to the
widest floating dtype among them. Ops absent run in the dtypes they are given. The data is
autocast_ops.json, made by scripts/gen_autocast_table.py, each device's entry stamped with the torch
version it came from. CPU is measured: every floating op torch exposes run under torch.autocast with
float32, low and mixed operands, so a composite op carries what its decomposition does (einsum reaches
bmm and runs low; cdist runs in float32). CUDA is measured the same way on a GPU (`make gpu-check`; an
H200, torch 2.11); the few ops no sample decided keep torch's CUDA autocast lists' policy (the entry's
"source" names them). Names are the functions'
`__name__` (aten-level); a Tensor method or a dunder maps to the same name (`__matmul__` → matmul).
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import torch

__all__ = ["FP32", "LOW", "PROMOTE", "SOURCES", "aten_op_name", "casting_devices", "casts_mixed", "policy"]

LOW, FP32, PROMOTE = "low", "fp32", "promote"

_DATA: dict[str, Any] = json.loads(
    resources.files(__package__).joinpath("autocast_ops.json").read_text(encoding="utf-8")
)
# where each device's table came from: torch version, device, measured or from the lists
SOURCES = {dev: {k: v for k, v in entry.items() if isinstance(v, str | bool)} for dev, entry in _DATA.items()}
_POLICIES = {
    (dev, low): entry[low]["policies"] for dev, entry in _DATA.items() for low in ("bfloat16", "float16")
}
# autocast casts the output, but mixed operands still raise (tensordot checks dtypes before its mm)
_MIXED_RAISES = {
    (dev, low): frozenset(entry[low]["mixed_raises"])
    for dev, entry in _DATA.items()
    for low in ("bfloat16", "float16")
}

# device types whose autocast follows CUDA's table (they share autocast_mode.cpp's lists); the other
# accelerators' autocast is only known to run matmul-like ops low (their fp32 lists are their own)
_CUDA_LIKE = frozenset({"cuda", "xpu", "mps"})
_OTHER = frozenset({"hpu", "mtia", "xla"})
_DEVICES = (*_CUDA_LIKE, *_OTHER, "cpu")
_ALIASES = {"__matmul__": "matmul", "__rmatmul__": "matmul", "__pow__": "pow", "__rpow__": "pow"}
_DEFAULT_LOW = {"cpu": "bfloat16"}  # the autocast dtype each device uses when none is given


def aten_op_name(func: Any) -> str:
    """The aten-level name of a torch function, Tensor method or functional."""
    name = getattr(func, "__name__", "") or ""
    return _ALIASES.get(name, name)


def _key(device_type: str, dtype: torch.dtype | str | None) -> tuple[str, str]:
    table = "cpu" if device_type == "cpu" else "cuda"
    if dtype is None:
        low = _DEFAULT_LOW.get(device_type, "float16")
    else:
        low = dtype if isinstance(dtype, str) else str(dtype).removeprefix("torch.")
    return table, low


def policy(device_type: str, func_or_name: Any, dtype: torch.dtype | str | None = None) -> str | None:
    """LOW, FP32, PROMOTE or None: what autocast(device_type, dtype) does to this op."""
    name = func_or_name if isinstance(func_or_name, str) else aten_op_name(func_or_name)
    if device_type != "cpu" and device_type not in _CUDA_LIKE and device_type not in _OTHER:
        return None
    found = _POLICIES.get(_key(device_type, dtype), {}).get(name)
    return found if device_type not in _OTHER or found == LOW else None


def casts_mixed(device_type: str, name: str, dtype: torch.dtype | str | None = None) -> bool:
    """Autocast(device_type, dtype) makes this op run with operands of mixed floating dtypes."""
    return policy(device_type, name, dtype) is not None and name not in _MIXED_RAISES.get(
        _key(device_type, dtype), frozenset()
    )


def casting_devices(name: str, kind: str | None = None) -> frozenset[str]:
    """Device types whose autocast, in both low dtypes, runs `name` with mixed operands (and gives it
    the policy `kind`, when given)."""
    return frozenset(
        d
        for d in _DEVICES
        if all(
            casts_mixed(d, name, low) and (kind is None or policy(d, name, low) == kind)
            for low in ("bfloat16", "float16")
        )
    )
