"""A dry run's repeats of a whole torch call, answered without running the call again.

The hybrid (hybrid.py) reuses each aten op's meta answer, yet a torch call (`F.linear`, a method,
`torch.cat`) still pays torch's dispatch and the hybrid's Python for every aten op under it: most of
a dry run. The watch runs each op it judged or tagged through `CallMemo.run` (it still judges and
tags every call, repeats included): a call met again with the same all-meta operands (every copy of
a repeated block) gets its outputs made from the first call's metadata, when that first call only
made fresh tensors: no op under it wrote into a tensor, nothing was assumed, and each output came
from a pure op under it (a view, or an operand handed back, is never reused).
"""

from __future__ import annotations

from typing import Any

import torch

from .hybrid import HybridMode, Recording, op_key, remade, spec_of

__all__ = ["CallMemo"]

_GIVE_UP = 8  # calls of a function never reusable so far, after which it is run unlooked-at
_PYTHON_KEY = torch._C.DispatchKeySet(torch._C.DispatchKey.Python)
_any_autocast = getattr(torch._C, "_is_any_autocast_enabled", lambda: True)


class CallMemo:
    """See the module docstring. Shares the hybrid's memo: its keys are pairs (the op key, whether
    autocast is on), the aten ops' keys are op keys, so the two never meet."""

    def __init__(self, mode: HybridMode) -> None:
        self.mode = mode
        self.memo = mode._memo
        self.misses: dict[Any, int] = {}
        self.reused: set[Any] = set()

    def run(self, func: Any, args: tuple, kwargs: dict) -> Any:
        try:
            hopeless = func not in self.reused and self.misses.get(func, 0) >= _GIVE_UP
        except TypeError:  # an unhashable callable
            hopeless = True
        if hopeless or torch.is_grad_enabled() or self.mode.recording is not None:
            return func(*args, **kwargs)
        try:
            key = (op_key(func, args, kwargs), _any_autocast())
        except TypeError:  # a real tensor among the operands, or an argument no key is made of
            return func(*args, **kwargs)
        spec = self.memo.get(key)
        if spec is not None:
            with torch._C._ExcludeDispatchKeyGuard(_PYTHON_KEY):  # past the hybrid, which would make a
                return remade(spec)  # small tensor made from nothing real
        mode, version = self.mode, self.mode.log.version
        recording = mode.recording = Recording()
        try:
            out = func(*args, **kwargs)
        finally:
            mode.recording = None
        spec = spec_of(out) if recording.fresh(out) and mode.log.version == version else None
        if spec is None:
            self.misses[func] = self.misses.get(func, 0) + 1
        else:
            self.memo[key] = spec
            self.reused.add(func)
        return out
