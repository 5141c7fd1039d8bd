"""A promotion the code meant: the wider result is not a leak, so it is not a silent promotion.

Two shapes, both read off the program rather than named per library:
- the promoted result is cast in the same expression (`(h * torch.rsqrt(var)).to(self.weight.dtype)`,
  a T5/RMS norm's float32 statistic): the author chose the result's dtype, nothing wide leaks;
- no running module owns parameters (a matcher, a loss, a metric) and every wide operand was upcast
  on purpose (`.float()`, `dtype=torch.float32`): the wide dtype is the one asked for.
"""

from __future__ import annotations

import ast
import sys
from types import FrameType
from typing import Any

import torch

from ..numerics.opsource import source_tree
from .intent import deliberate
from .provenance import USER, Provenance, frame_kind

_CASTS = frozenset({"to", "type", "type_as", "half", "bfloat16", "float", "double"})


def _user_frame(depth: int = 3) -> FrameType | None:
    try:
        f: FrameType | None = sys._getframe(depth)
    except ValueError:
        return None
    while f is not None and frame_kind(f.f_code) != USER:
        f = f.f_back
    return f


def _span(frame: FrameType) -> tuple[int, int, int, int] | None:
    """(line, end line, column, end column) of the expression the frame is evaluating."""
    try:
        positions = list(frame.f_code.co_positions())[frame.f_lasti // 2]
    except (IndexError, ValueError, AttributeError):
        return None
    return None if any(p is None for p in positions) else positions  # type: ignore[return-value]


def _cast_of(tree: ast.AST, span: tuple[int, int, int, int]) -> bool:
    """Some `<expr>.to(...)`-like call whose receiver holds the expression at `span`."""
    line, end_line, col, end_col = span
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _CASTS
            and node.lineno <= line
            and (node.end_lineno or node.lineno) >= end_line
        ):
            continue
        receiver = node.func.value
        start = (receiver.lineno, receiver.col_offset)
        stop = (receiver.end_lineno or receiver.lineno, receiver.end_col_offset or 0)
        if start <= (line, col) and (end_line, end_col) <= stop:
            return True
    return False


def recast_at_once(depth: int = 3) -> bool:
    """The user's expression running now casts its result explicitly (a promotion it undoes)."""
    frame = _user_frame(depth + 1)
    span = _span(frame) if frame is not None else None
    if frame is None or span is None:
        return False
    tree = source_tree(frame.f_code.co_filename)
    return tree is not None and _cast_of(tree, span)


def wide_on_purpose(wide: list[torch.Tensor], context: torch.dtype | None, prov: Provenance) -> bool:
    """No module's parameters give the dtype, and every wide operand was upcast deliberately."""
    if context is not None or not wide:
        return False
    return all(deliberate(t, prov) is not None for t in wide)


def meant(wide: list[torch.Tensor], session: Any) -> bool:
    """Either shape, for a promotion of `wide` (its floating operands) seen by the watch `session`
    (its running modules' dtype, its provenance); an internal error is the session's and counts as
    not meant: the finding stays."""
    try:
        wider = [t for t in wide if t.dtype not in (torch.float16, torch.bfloat16)]
        context = session.stack.param_dtype()
        return recast_at_once(4) or wide_on_purpose(wider, context, session.prov)
    except Exception as exc:
        session.internal_error(exc)
        return False
