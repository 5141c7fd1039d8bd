"""A tensor made with another tensor's dtype: its dtype was born where that tensor's was.

`deg = torch.zeros(n, dtype=edge_weight.dtype)` writes a dtype, but does not choose it: it follows
`edge_weight`, made float32 by default two lines up. The factory's result shares the origin of the
tensor whose `.dtype` it names (as `t.to(x.dtype)` does), so the lineage goes on to where that
dtype was born, and the line is not taken for an explicit, deliberate choice. Read from the source
line (parsed once per line) and the live frame (names and plain attributes, no call is made).
"""

from __future__ import annotations

import ast
import sys
from types import FrameType
from typing import Any

import torch
from torch import nn

from ..editing.finders import keyword_attribute
from .dtype_values import parse_line

_followed: dict[tuple[int, int], tuple[ast.expr, ...]] = {}


def _dtype_sources(code: Any, line: int) -> tuple[ast.expr, ...]:
    """The expressions `X` of each `dtype=X.dtype` keyword of a call on this line (X a name or a
    chain of attributes on a name). Cached per code object and line."""
    key = (id(code), line)
    found = _followed.get(key)
    if found is not None:
        return found
    exprs: list[ast.expr] = []
    tree = parse_line(code.co_filename, line)
    for node in ast.walk(tree) if tree is not None else ():
        source = keyword_attribute(node, "dtype", "dtype") if isinstance(node, ast.Call) else None
        if source is not None and _plain(source):
            exprs.append(source)
    _followed[key] = tuple(exprs)
    return _followed[key]


def _plain(expr: ast.expr) -> bool:
    while isinstance(expr, ast.Attribute):
        expr = expr.value
    return isinstance(expr, ast.Name)


def _attribute(owner: Any, name: str) -> Any:
    """`owner.name` without running code: a module's parameter, buffer or submodule, or an entry of
    the object's own `__dict__`."""
    if isinstance(owner, nn.Module):
        for table in (owner._parameters, owner._buffers, owner._modules):
            if name in table:
                return table[name]
    try:
        return vars(owner).get(name)
    except TypeError:
        return None


def _value(frame: FrameType, expr: ast.expr) -> Any:
    if isinstance(expr, ast.Name):
        return frame.f_locals.get(expr.id, frame.f_globals.get(expr.id))
    if isinstance(expr, ast.Attribute):
        owner = _value(frame, expr.value)
        return None if owner is None else _attribute(owner, expr.attr)
    return None


def followed_tensor(frame: FrameType, dtype: torch.dtype) -> torch.Tensor | None:
    """The tensor whose `.dtype` a call on the frame's line passes as `dtype=`, when it holds `dtype`."""
    for expr in _dtype_sources(frame.f_code, frame.f_lineno):
        value = _value(frame, expr)
        if isinstance(value, torch.Tensor) and value.dtype is dtype:
            return value
    return None


def followed_at(inner: tuple[Any, int], dtype: torch.dtype) -> torch.Tensor | None:
    """`followed_tensor` for the running frame of (code, line), found among the live frames."""
    if not _dtype_sources(inner[0], inner[1]):
        return None
    f: FrameType | None = sys._getframe(1)
    for _ in range(64):
        if f is None:
            return None
        if f.f_code is inner[0] and f.f_lineno == inner[1]:
            return followed_tensor(f, dtype)
        f = f.f_back
    return None
