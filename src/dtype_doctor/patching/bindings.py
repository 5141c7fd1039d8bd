"""The odd operand cast where the failing function last assigned it: the seam on the value's way
from its birth to the failing use, at the user's own line (`X = X.view(-1, d)` → `X = X.view(-1,
d).to(torch.float16)`), so the function's later lines (`dtype = X.dtype`) follow. When the odd
value is float32 on purpose (a `.float()` or a `dtype=torch.float32` the user wrote), this goes before
any cast at its birth: the user's float32 maths stays float32, and only its result meets the low
dtype. No torch import.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..editing import finders as find
from ..editing.fix_edits import shown_path
from ..editing.source import FACTORIES, call_name, cast_expr, castable
from ..report import Finding
from ..tracing.casts import INHERITING, cast_call
from .candidates import Candidate

if TYPE_CHECKING:
    from .plan import Planner


def last_assigned(planner: Planner, f: Finding, dtype: str) -> Iterator[Candidate]:
    """The local that held the odd operand when the op failed (`data["odd_variable"]`), cast to
    `dtype` where its function last assigned it before the failing statement; a parameter the
    function never reassigns, cast where the function begins."""
    held = f.data.get("odd_variable")
    if not isinstance(held, dict) or not isinstance(held.get("at"), str):
        return
    name = held.get("name")
    path, _, line = held["at"].rpartition(":")
    src = planner.source(path)
    if src is None or not line.isdigit() or not isinstance(name, str) or held.get("dtype") == dtype:
        return  # (the odd operand already in the wanted dtype: a module, not the tensor, is odd)
    use = src.statement_at(int(line))
    if use is None:
        return
    fn = find.enclosing_function(src, use.lineno)
    first = _deliberate(f)
    value = find.last_assignment(src, name, use.lineno, in_function=True)
    shown = shown_path(src.path)
    if value is not None:
        if castable(value) and not cast_call(value) and not _birth(value):
            yield Candidate(
                f"cast `{name}` to {dtype} where it is last assigned before its use at line "
                f"{use.lineno} ({shown}:{value.lineno})",
                [cast_expr(src, value, dtype)],
                first=first,
            )
    elif fn is not None and name in {a.arg for a in fn.args.args + fn.args.kwonlyargs} and fn.body:
        body = fn.body[0]
        if isinstance(body, ast.Expr) and isinstance(body.value, ast.Constant) and len(fn.body) > 1:
            body = fn.body[1]  # after the docstring
        yield Candidate(
            f"cast `{name}` to {dtype} where it enters `{fn.name}` ({shown}:{body.lineno})",
            [find.insert_before(src, body.lineno, f"{name} = {name}.to(torch.{dtype})")],
            first=first,
        )


def _birth(value: ast.expr) -> bool:
    """`torch.ones(n)`, `x.new_zeros(n)`: the assignment makes the tensor (given its dtype by the
    planner's birth edits, `dtype=`, not cast after it)."""
    return isinstance(value, ast.Call) and call_name(value.func).rsplit(".", 1)[-1] in FACTORIES | INHERITING


def _deliberate(f: Finding) -> bool:
    """The odd operand's wide dtype was asked for (findings.py's `intended.deliberate`)."""
    intended = f.data.get("intended")
    return isinstance(intended, dict) and bool(intended.get("deliberate"))
