"""A value cast down before the model reads it (a timestep, a position) keeps its exact value when the
cast is dropped; the model's first module that reads what is computed from it then needs its own
dtype. The fix is both edits: the value stays float32 (the cast dropped at its line), and the input
of that module is cast at the user's line that calls it (the embedding's output, not the value).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .. import remedies
from ..catalog.numerics import UNCAST_TO_CONSUMER
from ..remedies.places import OP
from ..report import Finding
from ..tracing.files import user_file
from . import opsource
from .frames import place, user_line, where

_LOW = (torch.float16, torch.bfloat16)


def low_dtype(module: nn.Module) -> torch.dtype | None:
    """The module's one float16/bfloat16 parameter dtype (None when it has several, or none low)."""
    dtypes = {p.dtype for p in module.parameters() if p.is_floating_point()}
    return dtypes.pop() if len(dtypes) == 1 and next(iter(dtypes)) in _LOW else None


def _library(file: str) -> bool:
    return not user_file(file)


def prepend(finding: Finding, module: nn.Module, name: str, attr: str, index: int) -> None:
    """`finding` (a cast down that rounds, made outside the model) gets first the fix that drops the
    cast and casts the input of `module` (`name` in reports, called as `attr`, what is computed from
    the value reaching its argument `index`) where the user's code calls it; nothing when that line
    is a library's or does not show the call."""
    op = finding.data.get("op") or {}
    dtype = low_dtype(module)
    file, line = user_line()
    if dtype is None or not file or not line or _library(file) or not attr.isidentifier():
        return
    dtype_name = str(dtype).replace("torch.", "")
    weight = isinstance(getattr(module, "weight", None), torch.Tensor)
    consumer = opsource.cast_call_argument(file, line, attr, index, weight)
    uncast = opsource.without_cast(op.get("file"), op.get("line"), op.get("op", "to"))
    if not consumer or not uncast:
        return
    fix = remedies.make(
        UNCAST_TO_CONSUMER,
        places={OP: place(op.get("file"), op.get("line"))},
        receiver=opsource.receiver(op.get("file"), op.get("line"), op.get("op", "to")) or "the value",
        at=f"at {where(op.get('file'), op.get('line'))}",
        uncast=uncast,
        consumer_cast=consumer,
        consumer_at=where(file, line),
        module=name,
        dtype_name=dtype_name,
    )
    if fix is not None:
        finding.fixes.insert(0, fix)


def tensor_index(args: tuple, wanted: Any) -> int | None:
    """The position of the first positional argument for which `wanted(arg)` holds."""
    return next((i for i, a in enumerate(args[:8]) if isinstance(a, torch.Tensor) and wanted(a)), None)
