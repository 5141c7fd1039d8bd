"""The precisions compare runs: a full cast to a dtype, or fp32 weights under autocast."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..dtypes import canonical, dtype_name
from ..errors import DoctorError

DEFAULT_PRECISIONS = ("fp32", "fp16", "bf16", "autocast-fp16", "autocast-bf16")
_SHORT = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64"}


@dataclass(frozen=True)
class Precision:
    """One way to run the model: a full cast to `dtype`, or fp32 weights under autocast(`dtype`)."""

    dtype: torch.dtype
    autocast: bool = False
    keep: tuple[str, ...] = ()

    @property
    def short(self) -> str:
        return _SHORT.get(dtype_name(self.dtype), dtype_name(self.dtype))

    @property
    def name(self) -> str:
        base = f"autocast-{self.short}" if self.autocast else self.short
        return f"{base}+keep{len(self.keep)}" if self.keep else base

    @property
    def is_reference(self) -> bool:
        return self.dtype == torch.float32 and not self.autocast and not self.keep


def parse_precision(text: str) -> Precision:
    """'fp16', 'bf16', 'fp32', 'autocast-fp16', 'amp-bf16', 'autocast_float16', 'half'..."""
    raw = text.strip().lower()
    autocast = False
    for prefix in ("autocast-", "autocast_", "autocast:", "amp-", "amp_", "mixed-"):
        if raw.startswith(prefix):
            autocast, raw = True, raw[len(prefix) :]
            break
    name = canonical(raw)
    if name is None or not name.startswith(("float", "bfloat")) or name.startswith("float8"):
        raise DoctorError(f"unknown precision {text!r}: expected e.g. fp32, fp16, bf16, autocast-fp16")
    if autocast and name not in ("float16", "bfloat16"):
        raise DoctorError(f"autocast runs in fp16 or bf16, not {name} ({text!r})")
    return Precision(getattr(torch, name), autocast)
