"""An op that a half dtype does not support (`torch.fft.fft` on bfloat16, a kernel with no Half
implementation): nothing in the call is the odd one, so no cast of one operand cures it. The
candidate computes the user's statement around the failing call in float32 from that call's input,
and casts the statement's result back to the input's dtype, so what follows runs as it did (a
float32 island). No torch import."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..dtypes import FLOATS
from ..editing import finders as find
from ..editing.source import Edit, call_name
from ..report import Finding, Severity
from .candidates import Candidate
from .targets import LOW_NAMES

if TYPE_CHECKING:
    from .plan import Planner


def unsupported(planner: Planner, f: Finding) -> Iterator[Candidate]:
    """The failing call's statement as a float32 island, for an error whose floating operands share
    one half dtype."""
    low = {o.dtype for o in f.operands if o.dtype in FLOATS}
    if f.severity != Severity.ERROR or len(low) != 1 or not low <= set(LOW_NAMES):
        return
    op = ((f.location.op if f.location else None) or "").rsplit(".", 1)[-1]
    for src, line in planner.user_places(f):
        stmt = src.statement_at(line)
        if not isinstance(stmt, ast.Return | ast.Assign) or stmt.value is None:
            continue
        calls = [c for c in find.calls_on(src, line) if _names(c, op) and _inside(c, stmt.value)]
        call = min(calls, key=lambda c: len(src.segment(c)), default=None)  # the innermost
        arg = call.args[0] if call is not None and call.args else None
        if call is None or not isinstance(arg, ast.Name | ast.Attribute):
            continue
        start, end = src.span(stmt.value)
        a, b = src.span(arg)
        text = src.text[start:a] + f"{src.segment(arg)}.float()" + src.text[b:end]
        name = src.segment(arg)
        yield Candidate(
            f"compute `{call_name(call.func)}` in float32 and cast the result back to `{name}.dtype` "
            f"({src.path}:{stmt.lineno})",
            [Edit(src.path, start, end, f"({text}).to({name}.dtype)")],
        )
        return


def _names(call: ast.Call, op: str) -> bool:
    """The call is the op (`torch.fft.fft` for `fft_fft` or `fft`)."""
    name = call_name(call.func).rsplit(".", 1)[-1]
    return bool(name) and (op == name or op.endswith("_" + name))


def _inside(call: ast.Call, value: ast.expr) -> bool:
    return any(node is call for node in ast.walk(value))
