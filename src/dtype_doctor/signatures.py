"""The positional argument names of a module's forward, read once per class (watch names operands
by them; fix's cast wrappers map arguments by them)."""

from __future__ import annotations

import inspect

from torch import nn

_SIGNATURES: dict[type, list[str] | None] = {}


def argument_names(module: nn.Module) -> list[str] | None:
    cls = type(module)
    if cls not in _SIGNATURES:
        try:
            params = inspect.signature(module.forward).parameters.values()
            _SIGNATURES[cls] = [
                p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            ]
        except (TypeError, ValueError):
            _SIGNATURES[cls] = None
    return _SIGNATURES[cls]
