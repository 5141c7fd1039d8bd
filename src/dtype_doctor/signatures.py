"""The positional argument names of a module's forward, read once per class (watch names operands
by them; fix's cast wrappers map arguments by them); the keyword arguments of a module call, which
global module hooks (watch's, numerics') are not given."""

from __future__ import annotations

import inspect
import sys

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


def call_kwargs() -> dict:
    """The keyword arguments of the module call whose global hook runs (a local of torch's
    `Module._call_impl` and of its `inner`, the hooks' caller): global hooks are not given them."""
    f = sys._getframe(2)  # this, the hook, its caller
    for _ in range(4):
        if f is None:
            break
        if f.f_code.co_name in _CALLERS:
            kwargs = f.f_locals.get("kwargs")
            return kwargs if isinstance(kwargs, dict) else {}
        f = f.f_back
    return {}


_CALLERS = ("inner", "_call_impl")
