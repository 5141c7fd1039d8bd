"""The user's statement with a number its destination dtype cannot hold replaced by that dtype's
own limit: `x.masked_fill(m, -1e8)` → `x.masked_fill(m, torch.finfo(x.dtype).min)`.

Read with `ast` from the user's file. The destination's dtype is the expression the call writes the
number with: its `dtype=` argument, else the receiver's `.dtype` (`x` in `x.masked_fill(...)`,
`x[i] = v`), else a tensor argument of that dtype (`torch.where(c, x, v)`: the branch that is not
the number), else the dtype itself (`torch.float16`). A caller that has the failing frame passes
`lookup` (a dotted name → its object, nothing called) to check that a receiver is a tensor and to
resolve `finfo(t.dtype)`; without it the statement alone decides. A name whose value is too big
(`values`) is clamped into the range where it is used: `max(d_min, torch.finfo(dtype).min)`.
"""

from __future__ import annotations

import ast
import linecache
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from .opsource import statement

Lookup = Callable[[ast.expr], Any]
_WIDE = {"float32", "float", "float64", "double"}  # `torch.finfo(torch.float32)`, read without a frame


@dataclass
class Spot:
    """A number on the statement the destination cannot hold: a literal, a name, a `finfo(...).min`."""

    node: ast.expr
    negative: bool
    kind: str  # literal | name | finfo
    dest: str = ""  # the destination's dtype expression


def number(node: ast.expr) -> float | None:
    """The value of a number literal (`1e8`, `-1e8`), None for anything else."""
    sign = 1.0
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        sign = -1.0 if isinstance(node.op, ast.USub) else 1.0
        node = node.operand
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return sign * float(node.value)
    return None


def too_big(value: object, dtype: torch.dtype) -> bool:
    """A finite Python number beyond `dtype`'s largest magnitude (an inf is written on purpose)."""
    if type(value) not in (int, float):
        return False
    return torch.finfo(dtype).max < abs(float(value)) < float("inf")  # type: ignore[arg-type]


def finfo_limit(node: ast.AST) -> ast.Call | None:
    """The `finfo(...)` call of a `finfo(...).min` / `.max` expression."""
    if isinstance(node, ast.Attribute) and node.attr in ("min", "max") and isinstance(node.value, ast.Call):
        func = node.value.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name == "finfo" and len(node.value.args) == 1:
            return node.value
    return None


def _a_count(node: ast.expr) -> bool:
    """A positive integer literal (`100000`): a size, a length or a step count, not a fill value."""
    return isinstance(node, ast.Constant) and type(node.value) is int


def _wider(arg: ast.expr, dtype: torch.dtype, lookup: Lookup | None) -> bool:
    """`finfo(arg)` is the limit of a dtype wider than `dtype`."""
    other = lookup(arg) if lookup is not None else None
    other = getattr(other, "dtype", other)
    if isinstance(other, torch.dtype):
        return other.is_floating_point and torch.finfo(other).max > torch.finfo(dtype).max
    return isinstance(arg, ast.Attribute) and arg.attr in _WIDE


def spots(
    stmt: ast.stmt,
    dtype: torch.dtype,
    values: Mapping[str, object] | None = None,
    lookup: Lookup | None = None,
) -> list[Spot]:
    """Each number on the statement `dtype` cannot hold, in source order."""
    out: list[Spot] = []
    inner: set[int] = set()
    for node in ast.walk(stmt):
        if id(node) in inner or not isinstance(node, ast.expr):
            continue
        found = number(node)
        if found is not None:
            if isinstance(node, ast.UnaryOp):
                inner.add(id(node.operand))
            if too_big(found, dtype) and not _a_count(node):
                out.append(Spot(node, found < 0, "literal"))
        elif (call := finfo_limit(node)) is not None:
            if _wider(call.args[0], dtype, lookup):
                out.append(Spot(node, node.attr == "min", "finfo"))  # type: ignore[attr-defined]
        elif isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load):
            # a name set elsewhere (`values`), or one the frame holds (`self.mask_value`, an import)
            value = (values or {}).get(node.id) if isinstance(node, ast.Name) else None
            if value is None and lookup is not None and _dotted(node):
                value = lookup(node)
            if too_big(value, dtype):
                out.append(Spot(node, float(value) < 0, "name"))  # type: ignore[arg-type]
    return sorted(out, key=lambda s: (s.node.lineno, s.node.col_offset))


def _dotted(node: ast.expr) -> bool:
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name) and node.id not in ("torch", "F", "np", "numpy", "math")


def _tensor(node: ast.expr, lookup: Lookup | None, dtype: torch.dtype | None = None) -> bool:
    """`node` names a tensor (of `dtype`, when given); without a frame, any dotted name might."""
    if lookup is None:
        return _dotted(node)
    held = lookup(node) if _dotted(node) else None
    return isinstance(held, torch.Tensor) and (dtype is None or held.dtype == dtype)


def destination(
    stmt: ast.stmt, spot: Spot, dtype: torch.dtype, torch_name: str, lookup: Lookup | None
) -> str:
    """The source of the dtype the number is written into, as the statement says it."""
    parents = {id(c): p for p in ast.walk(stmt) for c in ast.iter_child_nodes(p)}
    at: ast.AST | None = parents.get(id(spot.node))
    while at is not None and not isinstance(at, (ast.Call, ast.stmt)):
        at = parents.get(id(at))
    if isinstance(at, ast.Call):
        for kw in at.keywords:
            if kw.arg == "dtype":
                return ast.unparse(kw.value)
        func = at.func
        if isinstance(func, ast.Attribute) and _dotted(func.value) and _tensor(func.value, lookup):
            return f"{ast.unparse(func.value)}.dtype"
        args = [*at.args, *(kw.value for kw in at.keywords)]
        if isinstance(func, ast.Attribute) and func.attr == "where":
            args = at.args[1:]  # torch.where(condition, x, y): the condition is no destination
        for arg in args:
            if arg is not spot.node and _dotted(arg) and _tensor(arg, lookup, dtype):
                return f"{ast.unparse(arg)}.dtype"
    elif isinstance(at, ast.Assign) and isinstance(at.targets[0], ast.Subscript):
        held = at.targets[0].value
        if _dotted(held) and _tensor(held, lookup):
            return f"{ast.unparse(held)}.dtype"
    return f"{torch_name}.{str(dtype).replace('torch.', '')}"


def replacement(spot: Spot, torch_name: str) -> str:
    """What the number becomes: the limit, or the name clamped into the range."""
    end = "min" if spot.negative else "max"
    limit = f"{torch_name}.finfo({spot.dest}).{end}"
    if spot.kind == "literal":
        return limit
    if spot.kind == "finfo":
        return f"{ast.unparse(spot.node.value.func)}({spot.dest}).{end}"  # type: ignore[attr-defined]
    return f"{'max' if spot.negative else 'min'}({ast.unparse(spot.node)}, {limit})"


def _offset(lines: list[str], line: int, col: int) -> int:
    """The character offset of (line, UTF-8 byte column) in the text split into `lines`."""
    head = lines[line - 1].encode("utf-8")[:col].decode("utf-8", errors="ignore")
    return sum(len(x) for x in lines[: line - 1]) + len(head)


def splice(file: str, stmt: ast.stmt, edits: list[tuple[ast.expr, str]]) -> str | None:
    """The statement's text with each node's source replaced (a statement over several lines too);
    None when nothing changes or the result does not parse."""
    lines = "".join(linecache.getlines(file)).splitlines(keepends=True)
    if not lines or not edits:
        return None
    base = _offset(lines, stmt.lineno, stmt.col_offset)
    text = "".join(lines)[base : _offset(lines, stmt.end_lineno or stmt.lineno, stmt.end_col_offset or 0)]
    new = text
    for node, repl in sorted(edits, key=lambda e: (e[0].lineno, e[0].col_offset), reverse=True):
        start = _offset(lines, node.lineno, node.col_offset) - base
        end = _offset(lines, node.end_lineno or node.lineno, node.end_col_offset or 0) - base
        if not 0 <= start < end <= len(new):
            return None
        new = new[:start] + repl + new[end:]
    try:
        ast.parse(new)
    except SyntaxError:
        return None
    return new if new != text else None


def limited(
    file: str | None,
    line: int | None,
    dtype: torch.dtype,
    torch_name: str = "torch",
    values: Mapping[str, object] | None = None,
    lookup: Lookup | None = None,
) -> tuple[str, ast.stmt, list[Spot]] | None:
    """(the statement at `line` with each number `dtype` cannot hold made the destination's limit,
    its node, the numbers found); None when it holds none."""
    found = statement(file, line)
    if found is None or file is None:
        return None
    stmt = found[1]
    numbers = spots(stmt, dtype, values, lookup)
    for s in numbers:
        s.dest = destination(stmt, s, dtype, torch_name, lookup)
    text = splice(file, stmt, [(s.node, replacement(s, torch_name)) for s in numbers])
    return (text, stmt, numbers) if text else None


def limit_names(file: str | None, line: int | None, dtype: torch.dtype) -> tuple[set[str], dict[str, str]]:
    """The catalog context (`op-limit`) and names (`limited`, `number`, `limit`) of the fix that
    writes the dtype's own limit instead of a literal it cannot hold, read from the statement alone
    (a numerics finding has no frame)."""
    found = limited(file, line, dtype)
    if found is None or file is None:
        return set(), {}
    number = ast.get_source_segment("".join(linecache.getlines(file)), found[2][0].node) or "the number"
    return {"op-limit"}, {
        "limited": found[0],
        "number": f"`{number}`",
        "limit": f"{torch.finfo(dtype).max:g}",
    }
