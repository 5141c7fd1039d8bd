"""Apply and search the keep-in-float32 recommendation: chosen modules run in float32.

`keep_in_fp32(model, paths)` upcasts those modules' parameters and wraps their forward so that
floating inputs are cast to float32 (autocast off inside) and floating outputs back to the dtype
the input came in. The search for the smallest such set is numerics' (`numerics.fp32_set`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from .policy import KeepPattern, select


def _cast(obj: Any, dtype: torch.dtype) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.to(dtype) if obj.is_floating_point() and obj.dtype != dtype else obj
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_cast(o, dtype) for o in obj)
    if isinstance(obj, list):
        return [_cast(o, dtype) for o in obj]
    if isinstance(obj, dict):
        cast = {k: _cast(v, dtype) for k, v in obj.items()}
        try:
            return type(obj)(**cast) if type(obj) is not dict else cast
        except TypeError:
            obj.update(cast)
            return obj
    return obj


def _first_float_dtype(obj: Any) -> torch.dtype | None:
    if isinstance(obj, torch.Tensor):
        return obj.dtype if obj.is_floating_point() else None
    items = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (tuple, list)) else ()
    for item in items:
        found = _first_float_dtype(item)
        if found is not None:
            return found
    return None


class KeepFp32:
    """Handle of applied keep-in-float32 wrappers; `.remove()` restores forward and dtypes."""

    def __init__(self, model: nn.Module, paths: list[str]) -> None:
        self.paths = list(paths)
        self._undo: list[Callable[[], None]] = []
        for path in self.paths:
            self._apply(model.get_submodule(path))

    def _apply(self, module: nn.Module) -> None:
        dtypes = {p.dtype for p in module.parameters() if p.is_floating_point()}
        before = dtypes.pop() if len(dtypes) == 1 else None
        had_own = "forward" in module.__dict__
        original = module.forward

        def forward(*args: Any, **kwargs: Any) -> Any:
            back = _first_float_dtype((args, kwargs))
            device = next((p.device.type for p in module.parameters()), "cpu")
            with torch.autocast(device_type=device, enabled=False):
                out = original(*_cast(args, torch.float32), **_cast(kwargs, torch.float32))
            return _cast(out, back) if back is not None and back != torch.float32 else out

        module.float()
        module.forward = forward

        def undo() -> None:
            if had_own:
                module.forward = original
            else:
                module.__dict__.pop("forward", None)
            if before is not None:
                module.to(before)

        self._undo.append(undo)

    def remove(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()

    def __enter__(self) -> KeepFp32:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def keep_in_fp32(model: nn.Module, patterns: Iterable[KeepPattern] | str) -> KeepFp32:
    """Run the modules matching `patterns` in float32, casting at their border; `.remove()` undoes it.

    The patterns are fix()'s keep_fp32 language (policy.matches): module paths, globs, regexes,
    class-name words, module classes. DoctorError when a pattern matches no module."""
    if isinstance(patterns, str):
        patterns = [patterns]
    return KeepFp32(model, [name for name, _ in select(model, patterns)])
