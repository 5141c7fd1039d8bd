"""Decisions left undone on a tensor's or a model's way between where it was made and where it failed:
a move that left the dtype out (`x = x.to(device)`, `model.to(device=dev)`), and a cast the code has
but an `if` skipped (`if on_gpu: x = x.to(dtype=dt)`, run on CPU).

A `.to()` that names a device and no dtype is a place where the code decided the tensor's (or the
model's) placement and kept whatever dtype it had: the neighbour of the decision that was forgotten.
A cast of the very variable under an `if` that the failing tensor did not go through (it arrived in
the other dtype) is the decision written and not taken. Either edit completes what the code already
says (no new op of the tool's own), so the planner tries them before any cast it would add. Pure
`ast` reading, scoped to the function that holds the anchor line (the module's top level outside any
function); no torch import.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ..tracing.casts import cast_call
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


def skipped_casts(src: Source, name: str, anchor: int) -> Iterator[tuple[ast.If, ast.Assign]]:
    """`if COND: name = name.<cast>(...)` (no `else`) after `anchor` in its function: the `if` and
    the cast it holds, nearest first."""
    first, last = _span(src, anchor)
    for node in sorted(src.nodes(ast.If), key=lambda n: n.lineno):
        if not (anchor < node.lineno and first <= node.lineno <= last) or node.orelse:
            continue
        for stmt in node.body:
            if (
                isinstance(stmt, ast.Assign)
                and [ast.unparse(t) for t in stmt.targets] == [name]
                and cast_call(stmt.value)
                and ast.unparse(stmt.value.func.value) == name  # type: ignore[attr-defined]
            ):
                yield node, stmt


def dtype_parameter(src: Source, line: int) -> str | None:
    """The parameter of the function holding `line` that it passes as a dtype (`dtype=NAME`
    somewhere in its body): its own name for the dtype it works in. None when none or several."""
    fn = enclosing_function(src, line)
    if fn is None:
        return None
    params = {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}
    passed = {
        k.value.id
        for c in ast.walk(fn)
        if isinstance(c, ast.Call)
        for k in c.keywords
        if k.arg == "dtype" and isinstance(k.value, ast.Name) and k.value.id in params
    }
    return passed.pop() if len(passed) == 1 else None


def read_back(src: Source, line: int, depth: int = 4) -> list[str]:
    """The names (`x`, `self.table`) the statement at `line` reads, then those the earlier
    assignments of each in its function read, `depth` steps back: the failing value's way, nearest
    first."""
    first, _ = _span(src, line)
    stmt = src.statement_at(line)
    if stmt is None:
        return []
    out: list[str] = []
    todo = [(n, 0) for n in _reads(stmt)]
    while todo:
        name, hops = todo.pop(0)
        if name in out:
            continue
        out.append(name)
        if hops >= depth:
            continue
        for node in src.nodes((ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if first <= node.lineno < line and name in {ast.unparse(t) for t in targets} and node.value:
                todo.extend((n, hops + 1) for n in _reads(node.value))
    return out


def _reads(node: ast.AST) -> list[str]:
    """The outermost names and attribute chains of names a node reads, callees left out."""
    callees = {id(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)}
    found: list[str] = []
    inner: set[int] = set()
    for n in ast.walk(node):
        if id(n) in inner or id(n) in callees:
            inner.update(id(c) for c in ast.walk(n))
            continue
        if isinstance(n, (ast.Name, ast.Attribute)) and isinstance(n.ctx, ast.Load) and _of_names(n):
            inner.update(id(c) for c in ast.walk(n))
            found.append(ast.unparse(n))
    return list(dict.fromkeys(found))


def _of_names(node: ast.expr) -> bool:
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)
