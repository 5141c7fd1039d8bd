"""Fixes with code for a number the destination dtype cannot hold (overflow-on-cast).

`x.masked_fill(mask, -1e8)` on a float16 `x`, `torch.full(shape, d_min, dtype=torch.float16)` with
`d_min = torch.finfo(t.dtype).min` of a float32 `t`: torch refuses to write the number. The fix is
the limit of the dtype the number is written into, `torch.finfo(<destination>).min` (`.max` for a
positive number), in the user's names:

- where the number was set, when it is a name set from another dtype's `finfo` (or a literal) in a
  scope where the destination's dtype expression is already bound (the root: `LIMIT_AT_BIRTH`);
- at the failing statement (`LIMIT_AT_USE`): a literal becomes the limit, a name is clamped into
  the range (`max(d_min, torch.finfo(dtype).min)`), a `finfo(...)` there takes the destination.

The destination's dtype is the expression the call writes it with: its `dtype=` argument, else the
receiver's `.dtype` (`x` in `x.masked_fill(...)`, `x[i] = v`), else a tensor argument of that dtype
(`torch.where(c, x, v)`), else the dtype itself (`torch.float16`). Read with `ast` from the user's
file; names are looked up in the failing frame, nothing is evaluated.
"""

from __future__ import annotations

import ast
import builtins
import linecache
from types import FrameType
from typing import Any

import torch

from .. import remedies
from ..catalog.errors import LIMIT_AT_BIRTH, LIMIT_AT_USE
from ..numerics.opsource import source_tree, statement
from ..report import Fix, Operand
from .provenance import short_path
from .value_births import assigned_at

_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
_NAMESPACES = {torch, torch.nn.functional}


def limit_fixes(frame: FrameType, line: int, target: str | None, values: list[Operand]) -> list[Fix]:
    """The fixes for the failing statement at `line` of `frame`: at the birth of each value operand
    (`values`, from value_births.out_of_range) first, then at the statement itself."""
    dtype = _DTYPES.get(target or "")
    file = frame.f_code.co_filename
    found = statement(file, line)
    torch_name = _torch_name(frame)
    if dtype is None or found is None or torch_name is None:
        return []
    text, stmt = found
    values_by_name = {o.origin.name: o for o in values if o.origin is not None and o.origin.name}
    spots = _spots(stmt, frame, dtype, values_by_name)
    if not spots:
        return []
    where = short_path(file)
    names = {"target": target, "target_max": f"{torch.finfo(dtype).max:g}"}
    dests = [_destination(stmt, node, frame, dtype, torch_name) for node, _, _ in spots]
    out: list[Fix | None] = []
    for (node, _, _), dest in zip(spots, dests, strict=True):
        value = values_by_name.get(node.id) if isinstance(node, ast.Name) else None
        origin = value.origin if value is not None else None
        born = (
            _at_birth(file, origin.line, dest, frame, dtype, torch_name) if origin and origin.line else None
        )
        if born and value is not None and origin is not None:
            out.append(
                remedies.make(
                    LIMIT_AT_BIRTH,
                    file=where,
                    line=origin.line,
                    born_fix=born,
                    value=node.id,  # type: ignore[attr-defined]
                    born=f"{origin.file}:{origin.line}",
                    number=value.name,
                    **names,
                )
            )
    edits = [
        (n, _limited(n, neg, kind, dest, torch_name))
        for (n, neg, kind), dest in zip(spots, dests, strict=True)
    ]
    source = "".join(linecache.getlines(file))
    limited = _splice(source, stmt, text, edits)
    if limited:
        number = ast.get_source_segment(source, spots[0][0]) or "the number"
        at = f"at {where}:{stmt.lineno}"
        fix = remedies.make(
            LIMIT_AT_USE,
            file=where,
            line=stmt.lineno,
            limited=limited,
            number=f"`{number}`",
            dest=dests[0],
            at=at,
            **names,
        )
        out.append(fix)
    return [f for f in out if f is not None]


def _torch_name(frame: FrameType) -> str | None:
    """The name the user's module knows torch by (`torch`, or an alias), None when it has none."""
    scope = frame.f_globals
    if scope.get("torch") is torch:
        return "torch"
    return next((k for k, v in scope.items() if v is torch and k.isidentifier()), None)


def _number(node: ast.expr) -> float | None:
    """The value of a number literal (`1e8`, `-1e8`), None for anything else."""
    sign = 1.0
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        sign = -1.0 if isinstance(node.op, ast.USub) else 1.0
        node = node.operand
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, (int, float))
        and not isinstance(node.value, bool)
    ):
        return sign * float(node.value)
    return None


def _too_big(value: object, dtype: torch.dtype) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return torch.finfo(dtype).max < abs(float(value)) < float("inf")


def _lookup(node: ast.expr, frame: FrameType) -> Any:
    """The object a dotted name (`x`, `self.mask`, `torch.float32`) is in the frame; None otherwise.
    Only names and attributes are read: nothing is called."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    scopes = (frame.f_locals, frame.f_globals, vars(builtins))
    obj = next((s[node.id] for s in scopes if node.id in s), None)
    for part in reversed(parts):
        try:
            obj = getattr(obj, part)
        except Exception:
            return None
    return obj


def _finfo_limit(node: ast.expr) -> ast.Call | None:
    """The `finfo(...)` call of a `finfo(...).min` / `.max` expression."""
    if isinstance(node, ast.Attribute) and node.attr in ("min", "max") and isinstance(node.value, ast.Call):
        func = node.value.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name == "finfo" and len(node.value.args) == 1:
            return node.value
    return None


def _spots(
    stmt: ast.stmt, frame: FrameType, dtype: torch.dtype, values: dict[str, Operand]
) -> list[tuple[ast.expr, bool, str]]:
    """(node, negative, kind) for each number on the statement `dtype` cannot hold: a literal, a
    name whose value is one (`values`), a `finfo(<wider dtype>).min`."""
    out: list[tuple[ast.expr, bool, str]] = []
    inner: set[int] = set()
    for node in ast.walk(stmt):
        if id(node) in inner or not isinstance(node, ast.expr):
            continue
        number = _number(node)
        if number is not None:
            if isinstance(node, ast.UnaryOp):
                inner.add(id(node.operand))
            if _too_big(number, dtype):
                out.append((node, number < 0, "literal"))
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in values:
            value = frame.f_locals.get(node.id, frame.f_globals.get(node.id))
            if _too_big(value, dtype):
                out.append((node, float(value) < 0, "name"))  # type: ignore[arg-type]
            continue
        call = _finfo_limit(node)
        if call is not None:
            other = _lookup(call.args[0], frame)
            other = getattr(other, "dtype", other)
            if (
                isinstance(other, torch.dtype)
                and other.is_floating_point
                and torch.finfo(other).max > torch.finfo(dtype).max
            ):
                out.append((node, node.attr == "min", "finfo"))  # type: ignore[attr-defined]
    return sorted(out, key=lambda s: (s[0].lineno, s[0].col_offset))


def _parents(stmt: ast.stmt) -> dict[int, ast.AST]:
    return {id(child): parent for parent in ast.walk(stmt) for child in ast.iter_child_nodes(parent)}


def _simple(node: ast.expr) -> bool:
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _destination(
    stmt: ast.stmt, node: ast.expr, frame: FrameType, dtype: torch.dtype, torch_name: str
) -> str:
    """The source of the dtype the number is written into, as the statement says it."""
    parents = _parents(stmt)
    at: ast.AST | None = parents.get(id(node))
    while at is not None and not isinstance(at, (ast.Call, ast.stmt)):
        at = parents.get(id(at))
    if isinstance(at, ast.Call):
        for kw in at.keywords:
            if kw.arg == "dtype":
                return ast.unparse(kw.value)
        func = at.func
        receiver = func.value if isinstance(func, ast.Attribute) else None
        if receiver is not None and _simple(receiver) and isinstance(_lookup(receiver, frame), torch.Tensor):
            return f"{ast.unparse(receiver)}.dtype"
        for arg in [*at.args, *(kw.value for kw in at.keywords)]:
            held = _lookup(arg, frame) if arg is not node and _simple(arg) else None
            if isinstance(held, torch.Tensor) and held.dtype == dtype:
                return f"{ast.unparse(arg)}.dtype"
    elif isinstance(at, ast.Assign) and isinstance(at.targets[0], ast.Subscript):
        held = at.targets[0].value
        if _simple(held) and isinstance(_lookup(held, frame), torch.Tensor):
            return f"{ast.unparse(held)}.dtype"
    return f"{torch_name}.{str(dtype).replace('torch.', '')}"


def _limited(node: ast.expr, negative: bool, kind: str, dest: str, torch_name: str) -> str:
    """What the number becomes: the limit, or the name clamped into the range."""
    end = "min" if negative else "max"
    limit = f"{torch_name}.finfo({dest}).{end}"
    if kind == "literal":
        return limit
    if kind == "finfo":
        call = node.value  # type: ignore[attr-defined]
        return f"{ast.unparse(call.func)}({dest}).{end}"
    return f"{'max' if negative else 'min'}({ast.unparse(node)}, {limit})"


def _offset(lines: list[str], line: int, col: int) -> int:
    """The character offset of (line, UTF-8 byte column) in the text split into `lines`."""
    head = lines[line - 1].encode("utf-8")[:col].decode("utf-8", errors="ignore")
    return sum(len(x) for x in lines[: line - 1]) + len(head)


def _splice(source: str, stmt: ast.stmt, text: str, edits: list[tuple[ast.expr, str]]) -> str | None:
    """The statement's text with each node's source replaced (multi-line statements too); None when
    the result does not parse."""
    lines = source.splitlines(keepends=True)
    base = _offset(lines, stmt.lineno, stmt.col_offset)
    new = text
    for node, replacement in sorted(edits, key=lambda e: (e[0].lineno, e[0].col_offset), reverse=True):
        start = _offset(lines, node.lineno, node.col_offset) - base
        end = _offset(lines, node.end_lineno or node.lineno, node.end_col_offset or 0) - base
        if not 0 <= start < end <= len(new):
            return None
        new = new[:start] + replacement + new[end:]
    try:
        ast.parse(new)
    except SyntaxError:
        return None
    return new if new != text else None


def _bound_at(file: str, line: int, expr: str, frame: FrameType) -> bool:
    """Every name `expr` reads is bound at `line`: a parameter of its function, a name assigned
    before it there, a global or builtin."""
    try:
        read = {n.id for n in ast.walk(ast.parse(expr, mode="eval")) if isinstance(n, ast.Name)}
    except SyntaxError:
        return False
    tree = source_tree(file)
    params: set[str] = set()
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno < line <= (
            node.end_lineno or 0
        ):
            a = node.args
            params |= {
                x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg] if x is not None
            }
    known = set(frame.f_globals) | set(vars(builtins))
    return all(n in params or n in known or assigned_at(file, line, n) is not None for n in read)


def _at_birth(
    file: str, line: int, dest: str, frame: FrameType, dtype: torch.dtype, torch_name: str
) -> str | None:
    """The statement that set the value, with the destination's limit: `finfo(<other>)` made
    `finfo(<destination>)`, a literal the limit; None when the destination's dtype is not known
    there."""
    found = statement(file, line)
    if found is None or not _bound_at(file, line, dest, frame):
        return None
    text, stmt = found
    edits: list[tuple[ast.expr, str]] = []
    for node in ast.walk(stmt):
        call = _finfo_limit(node) if isinstance(node, ast.expr) else None
        if call is not None and ast.unparse(call.args[0]) != dest:
            edits.append((call.args[0], dest))
    if not edits and isinstance(stmt, ast.Assign):
        number = _number(stmt.value)
        if number is not None and _too_big(number, dtype):
            edits.append((stmt.value, f"{torch_name}.finfo({dest}).{'min' if number < 0 else 'max'}"))
    return _splice("".join(linecache.getlines(file)), stmt, text, edits) if edits else None
