"""A module call in progress under NumericsMonitor, and the cheap names its hooks give things
(they run on every module call of a monitored step)."""

from __future__ import annotations

import torch

from ..dtypes import dtype_name
from .analysis import Call

_ARG_NAMES = tuple(str(i) for i in range(32))  # positional inputs are named by their index
_DTYPE_NAMES: dict[torch.dtype, str] = {}


class Frame:
    __slots__ = ("call", "kwargs", "path", "ref", "rng")

    def __init__(
        self,
        path: str,
        call: Call | None,
        kwargs: dict | None = None,
        rng: tuple | None = None,
        ref: list | None = None,
    ) -> None:
        self.path = path
        self.call = call  # None: a call of a step that is not monitored
        self.kwargs = kwargs  # the call's keyword arguments (global hooks get no kwargs)
        self.rng = rng  # the RNG states at the call's start, kept for a float32 re-run
        self.ref = ref  # its float32 outputs, when the accuracy check runs on this call


def arg_names(n: int) -> tuple[str, ...]:
    """The names of `n` positional inputs: '0', '1', ..."""
    return _ARG_NAMES if n <= len(_ARG_NAMES) else tuple(str(i) for i in range(n))


def short_dtype_name(dtype: torch.dtype) -> str:
    """`dtype_name`, remembered per dtype."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = dtype_name(dtype)
    return name
