"""Moves that left the dtype out: `x = x.to(device)`, `model.to(device=dev)` on a tensor's or a model's
way between where it was made and where it failed.

A `.to()` that names a device and no dtype is a place where the code decided the tensor's (or the
model's) placement and kept whatever dtype it had: the neighbour of the decision that was forgotten.
Giving that call the dtype completes a cast the code already makes (no new statement, no new op), so
the planner tries it before any cast it would add. Pure `ast` reading, scoped to the function that
holds the anchor line (the module's top level outside any function); no torch import.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from .finders import enclosing_function
from .source import Source


def _device_like(node: ast.expr) -> bool:
    """`"cuda"`, `torch.device(...)`, `x.device`, a name or attribute that says device."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.Call):
        return _device_like(node.func)
    if isinstance(node, ast.Attribute):
        return "device" in node.attr.lower()
    return isinstance(node, ast.Name) and "device" in node.id.lower()


def without_dtype(call: ast.Call) -> bool:
    """`.to(DEVICE)` / `.to(device=DEVICE)`: a device named, no dtype (nor a tensor or `**kw` to take
    one from)."""
    if not (isinstance(call.func, ast.Attribute) and call.func.attr == "to"):
        return False
    keywords = {k.arg for k in call.keywords}
    if None in keywords or "dtype" in keywords or len(call.args) > 1:
        return False
    if call.args:
        return _device_like(call.args[0])
    return "device" in keywords


def _span(src: Source, anchor: int) -> tuple[int, int]:
    fn = enclosing_function(src, anchor)
    if fn is None:
        return 1, len(src.lines)
    return fn.lineno, fn.end_lineno or fn.lineno


def moves(src: Source, name: str, anchor: int, after: bool) -> Iterator[ast.Call]:
    """The dtype-less moves of `name` (as written: `x`, `self.proj`) in the function holding
    `anchor`: those after it (the value was made at `anchor`) or before it (it was used there),
    nearest first."""
    first, last = _span(src, anchor)
    found = [
        c
        for c in src.nodes(ast.Call)
        if first <= c.lineno <= last
        and (c.lineno > anchor if after else c.lineno < anchor)
        and without_dtype(c)
        and ast.unparse(c.func.value) == name  # type: ignore[attr-defined]
    ]
    yield from sorted(found, key=lambda c: c.lineno if after else -c.lineno)


def assigned_names(src: Source, line: int) -> list[str]:
    """The targets (`x`, `self.proj`) of the assignment on `line`."""
    stmt = src.statement_at(line)
    if not isinstance(stmt, (ast.Assign, ast.AnnAssign)):
        return []
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
    flat = [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
    return [ast.unparse(t) for t in flat if isinstance(t, (ast.Name, ast.Attribute))]
