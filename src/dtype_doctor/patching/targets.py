"""Which dtype a cause's candidates give the odd operands: the half dtype the operands show (the
user's intent), the consumer's by the report's evidence, and an in-place call's destination's. No
torch import."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from ..causes import root_origin
from ..dtypes import FLOATS
from ..editing import finders as find
from ..report import Finding
from ..tracing.inplace import in_place

if TYPE_CHECKING:
    from .plan import Planner

LOW_NAMES = ("float16", "bfloat16")


def destination_dtype(planner: Planner, f: Finding) -> str | None:
    """The dtype of the tensor an in-place call at the finding's line of the user's writes into
    (`state.lerp_(x, w)`: `state`'s), its first operand."""
    op = (f.location.op if f.location else None) or ""
    first = f.operands[0].dtype if f.operands else None
    for src, line in planner.user_places(f):
        for call in find.calls_on(src, line):
            if isinstance(call.func, ast.Attribute) and in_place(call.func.attr) == (
                op.rsplit(".", 1)[-1],
                True,
            ):
                return first if first in FLOATS else None
    return None


def target_dtype(f: Finding) -> str | None:
    """The dtype the cause should become: the half dtype the operands show (the user's intent), else
    the one the op needed."""
    low = {o.dtype for o in f.operands if o.dtype in LOW_NAMES}
    expected = f.data.get("expected_dtype")
    if low and isinstance(expected, str) and expected not in LOW_NAMES and by_autocast(f):
        return expected  # autocast made them half by design: the model's own dtype is not lowered
    if len(low) == 1:
        return low.pop()
    if isinstance(expected, str):
        return expected
    wide = {o.dtype for o in f.operands if o.dtype in ("float32", "float64")}
    return "float32" if wide == {"float32", "float64"} and not low else None  # a float64 intruder


def intended_dtype(f: Finding) -> str | None:
    """The dtype the report's evidence says the data should have (watching/intent.py), if a float."""
    intended = f.data.get("intended")
    dtype = intended.get("dtype") if isinstance(intended, dict) else None
    return dtype if isinstance(dtype, str) and dtype in FLOATS else None


def by_autocast(f: Finding) -> bool:
    """Every half operand was made half by autocast (its root origin is autocast's)."""
    low = [o for o in f.operands if o.dtype in LOW_NAMES]
    return all(o.origin is not None and root_origin(o.origin).kind == "autocast" for o in low)
