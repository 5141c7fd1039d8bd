"""Tensors born from NumPy arrays where no torch function sees them.

`torch.from_numpy` takes no tensor, and torch does not hand it to a TorchFunctionMode (as it does
`torch.tensor`/`torch.as_tensor`): its result keeps the array's dtype (NumPy's default is float64)
and would reach the model untracked. Patched for the watch, it is born at the caller's line, like a
factory: the line of yours that made it, also through a library (a feature extractor, a collate).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from .provenance import Provenance, Tag, caller_frames, qualified_op_name
from .tagging import made_name


def watch_from_numpy(prov: Provenance, on_error: Callable[[BaseException], None]) -> Callable[[], None]:
    """Tag what `torch.from_numpy` returns as born at its caller; returns the undo."""
    original = torch.from_numpy
    op = qualified_op_name(original)

    @functools.wraps(original)
    def from_numpy(*args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)
        try:
            if isinstance(out, torch.Tensor) and out.is_floating_point():
                inner, user = caller_frames(2)
                name = made_name(inner, op) if inner is not None and inner == user else None
                prov.set(out, Tag("op", out.dtype, op, name, None, inner, user))
        except Exception as exc:  # never let the tool's bookkeeping fail the user's program
            on_error(exc)
        return out

    torch.from_numpy = from_numpy

    def undo() -> None:
        if torch.from_numpy is from_numpy:
            torch.from_numpy = original

    return undo
