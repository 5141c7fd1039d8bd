"""What the experiment's intervention knows of dtypes and ops: which dtypes are low and what they
are computed in (a tier), an in-place op's out-of-place twin, whether values are finite.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..tracing.casts import CAN_LOWER, LOWERING_FROM_FLOAT64, LOWERING_METHODS
from ..tracing.inplace import in_place

LOW = (torch.float16, torch.bfloat16)


def writes(name: str) -> bool:
    """An in-place op or a write (`add_`, `__iadd__`, `__setitem__`): an upcast copy would not be
    written back."""
    return name == "__setitem__" or in_place(name)[1]


def out_of_place(name: str) -> Any:
    """The out-of-place twin of an in-place tensor op (`div_` → `Tensor.div`, `__iadd__` →
    `Tensor.__add__`), None for a write with none (`__setitem__`, `copy_`, `exponential_`)."""
    twin, inplace = in_place(name)
    if not inplace or name in _NO_TWIN:
        return None
    found = getattr(torch.Tensor, twin, None)
    return found if callable(found) else None


# in-place ops whose name without `_` is another op (or a property): never computed out of place
_NO_TWIN = frozenset({"resize_", "resize_as_", "bernoulli_", "set_", "requires_grad_", "detach_"})


@dataclass(frozen=True)
class Tier:
    """Which dtypes are low and what they are computed in: float16/bfloat16 in float32 (the
    default), or, `wide`, float32 as well in float64 (a float32 program whose precision fails it)."""

    low: tuple[torch.dtype, ...]
    up: torch.dtype
    lowering: frozenset[str]  # the methods that cast to a low dtype
    can_lower: frozenset[str]  # the casts that may
    # factories that make the default dtype when none is asked: low when it is (`torch.tensor(0.5)`
    # under `set_default_dtype(torch.bfloat16)`; float32 in the wide tier)
    defaulting: frozenset[str] = frozenset()

    def is_low_dtype(self, x: Any) -> bool:
        return type(x) is torch.dtype and x in self.low

    def is_low(self, x: Any) -> bool:
        return isinstance(x, torch.Tensor) and x.dtype in self.low

    def up_copy(self, x: Any) -> Any:
        return x.to(self.up) if self.is_low(x) else x


# factories that make the default dtype when none is asked (not the random ones: another draw
# would change the program's stream)
_DEFAULTING = frozenset(
    {"tensor", "as_tensor", "zeros", "ones", "full", "empty", "arange", "linspace", "logspace", "eye"}
)
HALF = Tier(LOW, torch.float32, LOWERING_METHODS, CAN_LOWER, _DEFAULTING)
WIDE = Tier((torch.float32, *LOW), torch.float64, LOWERING_FROM_FLOAT64, CAN_LOWER | {"float"}, _DEFAULTING)


def nonfinite(out: Any, tier: Tier) -> bool:
    """A low-precision output holding inf/NaN."""
    outs = [x for x in (out if isinstance(out, (list, tuple)) else (out,)) if tier.is_low(x)]
    return any(not torch.isfinite(x).all() for x in outs)


def finite(operands: tuple) -> bool:
    """Every floating tensor operand is finite."""
    ins = [x for a in operands for x in (a if isinstance(a, (list, tuple)) else (a,))]
    return all(torch.isfinite(x).all() for x in ins if isinstance(x, torch.Tensor) and x.is_floating_point())
