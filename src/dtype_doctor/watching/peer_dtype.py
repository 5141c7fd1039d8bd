"""The user's expression whose `.dtype` is the dtype an op's destination has, read off the line that
runs the op: `x` for `torch.zeros_like(x).scatter_add(0, idx, y)`, `cache` for `cache[pos] = v`.

A cast written as `y.to(x.dtype)` holds on every call and every iteration of a loop, where the
destination's dtype may change (an autocast region, a norm returning float32 on the second pass); a
dtype literal holds only for the one observation the finding was made on."""

from __future__ import annotations

import ast
import linecache
from collections.abc import Sequence
from types import FrameType
from typing import Any

import torch

from .names import calls_at, is_path, resolve_text

# methods whose result keeps the receiver's dtype (when no dtype= is given)
_KEEPS = frozenset(
    {
        "clone", "detach", "contiguous", "view", "reshape", "expand", "expand_as", "flatten", "squeeze",
        "unsqueeze", "transpose", "permute", "narrow", "new_zeros", "new_ones", "new_empty", "new_full",
        "zero_", "fill_", "scatter", "scatter_", "scatter_add", "scatter_add_", "index_put", "index_put_",
        "index_add", "index_add_", "index_copy", "index_copy_", "masked_scatter", "masked_scatter_",
    }
)  # fmt: skip


def _holder(node: ast.expr, frame: FrameType, dtype: torch.dtype) -> str | None:
    """The name path in `node` whose tensor has `dtype` and decides the dtype `node` evaluates to."""
    text = ast.unparse(node)
    if is_path(text):
        value = resolve_text(text, frame)
        return text if isinstance(value, torch.Tensor) and value.dtype == dtype else None
    if isinstance(node, ast.Subscript):
        return _holder(node.value, frame, dtype)
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return None
    if any(k.arg == "dtype" for k in node.keywords):
        return None
    if node.func.attr.endswith("_like") and node.args:  # torch.zeros_like(x): x's dtype
        return _holder(node.args[0], frame, dtype)
    if node.func.attr in _KEEPS:
        return _holder(node.func.value, frame, dtype)
    return None


def _destinations(frame: FrameType, method: str) -> list[ast.expr]:
    """The destination expressions of `method` (a tensor method, or torch's function of that name,
    whose first argument is the destination) on the frame's current line; `x[i] = v` targets too."""
    found: list[ast.expr] = []
    for call in calls_at(frame.f_code.co_filename, frame.f_lineno):
        func = call.func
        if not isinstance(func, ast.Attribute) or func.attr != method:
            continue
        torch_function = isinstance(func.value, ast.Name) and func.value.id == "torch"
        if torch_function:
            found.extend(call.args[:1])
        else:
            found.append(func.value)
    if method.startswith("__setitem__"):
        try:
            line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
            stmt = ast.parse(line).body[0] if line else None
        except (SyntaxError, IndexError):
            stmt = None
        if isinstance(stmt, ast.Assign):
            found.extend(t.value for t in stmt.targets if isinstance(t, ast.Subscript))
    return found


def destination_holder(frame: FrameType | None, op: str, destination: torch.Tensor | None) -> str | None:
    """The user's name whose `.dtype` is the dtype of `destination`, the tensor `op` writes into on
    the line `frame` runs; None when the line does not name one (the cast then states a dtype)."""
    if frame is None or destination is None:
        return None
    method = op.rsplit(".", 1)[-1].split(" ", 1)[0]
    for node in _destinations(frame, method):
        name = _holder(node, frame, destination.dtype)
        if name is not None:
            return name
    return None


def holder_for(
    operands: Sequence[Any], op: str, frame: FrameType | None, odd: torch.Tensor | None
) -> str | None:
    """`destination_holder` for a finding's operands (each with a `role` and a `tensor`), when the
    value written is the odd one (a destination itself odd: its dtype is not the one to take)."""
    dest = next((s.tensor for s in operands if s.role == "destination"), None)
    return destination_holder(frame, op, dest) if dest is not None and dest is not odd else None
