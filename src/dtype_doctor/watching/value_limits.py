"""Fixes with code for a number the destination dtype cannot hold (overflow-on-cast), when torch
refuses to write it: `x.masked_fill(mask, -1e8)` on a float16 `x`, `torch.full(shape, d_min,
dtype=torch.float16)` with `d_min = torch.finfo(t.dtype).min` of a float32 `t`.

The fix is the limit of the dtype the number is written into, in the user's names
(numerics/limit_source.py writes the statements, with the failing frame's names):

- where the number was set, when it is a name set from another dtype's `finfo` (or a literal) in a
  scope where the destination's dtype expression is already bound (the root: `LIMIT_AT_BIRTH`);
- at the failing statement (`LIMIT_AT_USE`): a literal becomes the limit, a name is clamped into
  the range, a `finfo(...)` there takes the destination.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import linecache
from types import FrameType
from typing import Any

import torch

from .. import remedies
from ..catalog.errors import LIMIT_AT_BIRTH, LIMIT_AT_USE
from ..numerics import limit_source
from ..numerics.opsource import source_tree, statement
from ..report import Fix, Operand
from .provenance import short_path
from .value_births import assigned_at

_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def limit_fixes(frame: FrameType, line: int, target: str | None, values: list[Operand]) -> list[Fix]:
    """The fixes for the failing statement at `line` of `frame`: at the birth of each value operand
    (`values`, from value_births.out_of_range) first, then at the statement itself."""
    dtype = _DTYPES.get(target or "")
    torch_name = _torch_name(frame)
    if dtype is None or torch_name is None:
        return []
    file = frame.f_code.co_filename
    named = {o.origin.name: o for o in values if o.origin is not None and o.origin.name}
    numbers = {n: frame.f_locals.get(n, frame.f_globals.get(n)) for n in named}
    found = limit_source.limited(file, line, dtype, torch_name, numbers, lambda n: _lookup(n, frame))
    if found is None:
        return []
    text, stmt, spots = found
    where = short_path(file)
    names = {"target": target, "target_max": f"{torch.finfo(dtype).max:g}"}
    out: list[Fix | None] = []
    for spot in spots:
        value = named.get(spot.node.id) if isinstance(spot.node, ast.Name) else None
        origin = value.origin if value is not None else None
        if value is None or origin is None or not origin.line:
            continue
        born = _at_birth(file, origin.line, spot.dest, frame, dtype, torch_name)
        made = remedies.make(
            LIMIT_AT_BIRTH,
            file=where,
            line=origin.line,
            born_fix=born,
            value=origin.name,
            born=f"{origin.file}:{origin.line}",
            number=value.name,
            **names,
        )
        out.append(made)
    number = ast.get_source_segment("".join(linecache.getlines(file)), spots[0].node) or "the number"
    at = f"at {where}:{stmt.lineno}"
    use = remedies.make(
        LIMIT_AT_USE,
        file=where,
        line=stmt.lineno,
        limited=text,
        number=f"`{number}`",
        dest=spots[0].dest,
        at=at,
        **names,
    )
    return [f for f in [*out, use] if f is not None]


def _torch_name(frame: FrameType) -> str | None:
    """The name the user's module knows torch by (`torch`, or an alias), None when it has none."""
    scope = frame.f_globals
    if scope.get("torch") is torch:
        return "torch"
    return next((k for k, v in scope.items() if v is torch and k.isidentifier()), None)


def _lookup(node: ast.expr, frame: FrameType) -> Any:
    """The object a dotted name (`x`, `self.mask`, `torch.float32`) is in the frame; None otherwise.
    Only names and attributes are read: no property of the user's is called."""
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
            if isinstance(inspect.getattr_static(obj, part, None), property):
                return None  # the user's own code would run: not read
            obj = getattr(obj, part)
        except Exception:
            return None
    return obj


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
            every = [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
            params |= {x.arg for x in every if x is not None}
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
    stmt = found[1]
    edits: list[tuple[ast.expr, str]] = []
    for node in ast.walk(stmt):
        call = limit_source.finfo_limit(node)
        if call is not None and ast.unparse(call.args[0]) != dest:
            edits.append((call.args[0], dest))
    if not edits and isinstance(stmt, ast.Assign):
        value = limit_source.number(stmt.value)
        if value is not None and limit_source.too_big(value, dtype):
            edits.append((stmt.value, f"{torch_name}.finfo({dest}).{'min' if value < 0 else 'max'}"))
    return limit_source.splice(file, stmt, edits)
