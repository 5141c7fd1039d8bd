"""Where a dtype *value* was chosen: the constant or variable that flows into a cast's dtype.

`x.to(self.compute_dtype)` casts to the dtype a module attribute holds; that attribute was set in
`__init__` from an argument, which the caller passed from a constant (`COMPUTE_DTYPE =
torch.float32` at the top of the file). The tensor lineage stops at the cast; the dtype was chosen
at the constant. Likewise a module-wide `.double()` under `if sample.dtype == np.float64:` was
decided by the array `sample`, made where that name was assigned. (A module shared between
models from a cache: `shared_modules.py`.) Read from the live frames while
the cast (or conversion) runs, and from the source: a name that is a parameter of its function is
followed to the argument its caller passed; a local or global name to its last assignment; a
module attribute to the statement that set it (recorded as it was set, `record_attribute`).
"""

from __future__ import annotations

import ast
import functools
import linecache
import sys
import weakref
from types import FrameType
from typing import Any, NamedTuple

import torch
from torch import nn

from ..editing.source import file_stamp
from ..numerics.opsource import source_tree
from ..tracing.casts import DTYPE_ARGUMENT, cast_call
from . import read_dtype
from .provenance import USER, Tag, frame_kind
from .value_births import assigned_at

_MAX_HOPS = 6


class Site(NamedTuple):
    """A line of source where a dtype value was passed on or chosen."""

    file: str
    line: int
    source: str
    name: str


class _Code(NamedTuple):
    """What `provenance.where` reads of a code object, for a line no live frame runs."""

    co_filename: str
    co_name: str


_attributes: weakref.WeakKeyDictionary[nn.Module, dict[str, tuple[Site, ...]]] = weakref.WeakKeyDictionary()


def parse_line(filename: str, line: int) -> ast.AST | None:
    """The statement at `line` (its first line), parsed; None when it does not parse alone."""
    return _parse_statement(linecache.getline(filename, line).strip())


@functools.lru_cache(maxsize=256)
def _parse_statement(text: str) -> ast.AST | None:
    if text.endswith(":"):
        text += " pass"
    try:
        return ast.parse(text)
    except SyntaxError:
        return None


def user_frame() -> FrameType | None:
    """The innermost frame of the user's own code calling this one's caller."""
    f: FrameType | None = sys._getframe(2)
    while f is not None and frame_kind(f.f_code) != USER:
        f = f.f_back
    return f


def _user_caller(frame: FrameType) -> FrameType | None:
    f = frame.f_back
    while f is not None and frame_kind(f.f_code) != USER:
        f = f.f_back
    return f


def _argument(caller: FrameType, callee: FrameType, param: str) -> ast.expr | None:
    """The expression the caller's line passes as `param` of the function running in `callee`."""
    tree = parse_line(caller.f_code.co_filename, caller.f_lineno)
    if tree is None:
        return None
    code = callee.f_code
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    self_obj = callee.f_locals.get("self") if names and names[0] == "self" else None
    wanted = {code.co_name} | ({type(self_obj).__name__} if code.co_name == "__init__" else set())
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        called = (
            func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        )
        if called not in wanted:
            continue
        for kw in node.keywords:
            if kw.arg == param:
                return kw.value
        index = names.index(param) - (1 if self_obj is not None else 0)
        if 0 <= index < len(node.args) and not any(
            isinstance(a, ast.Starred) for a in node.args[: index + 1]
        ):
            return node.args[index]
    return None


def resolve(frame: FrameType, expr: ast.expr, hops: int = 0) -> list[Site]:
    """The lines a dtype value named by `expr` (read in `frame`) came through, nearest first."""
    if hops > _MAX_HOPS:
        return []
    filename, line = frame.f_code.co_filename, frame.f_lineno
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
        owner = frame.f_locals.get(expr.value.id)
        if isinstance(owner, nn.Module):
            return list(_attributes.get(owner, {}).get(expr.attr, ()))
        return []
    if not isinstance(expr, ast.Name):
        return []
    name = expr.id
    code = frame.f_code
    params = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    if name in params:
        caller = _user_caller(frame)
        arg = _argument(caller, frame, name) if caller is not None else None
        if caller is None or arg is None:
            return []
        here = Site(
            caller.f_code.co_filename,
            caller.f_lineno,
            linecache.getline(caller.f_code.co_filename, caller.f_lineno).strip(),
            ast.unparse(arg),
        )
        return [here, *resolve(caller, arg, hops + 1)]
    found = assigned_at(filename, line, name)
    if found is None:
        return []
    read_dtype.record(frame, found[0], found[1])  # `dtype = w.dtype` of an int8 weight: where to read it
    return [Site(filename, found[0], found[1], name)]


def record_attribute(module: nn.Module, name: str, frame: FrameType | None) -> None:
    """`self.<name> = <dtype>` runs at `frame`: remember the lines that value came through."""
    if frame is None:
        return
    tree = parse_line(frame.f_code.co_filename, frame.f_lineno)
    stmt = tree.body[0] if isinstance(tree, ast.Module) and tree.body else None
    if not isinstance(stmt, (ast.Assign, ast.AnnAssign)) or stmt.value is None:
        return
    here = Site(frame.f_code.co_filename, frame.f_lineno, ast.unparse(stmt), name)
    _attributes.setdefault(module, {})[name] = (here, *resolve(frame, stmt.value))


def value_tags(sites: list[Site], dtype: torch.dtype) -> tuple[Tag, ...]:
    """The chosen value as the origin of what it made: a Tag per site, the nearest first, each the
    parent of the one before (the farthest, where the value was written, is the root)."""
    chain: Tag | None = None
    for site in reversed(sites):
        frame = (_Code(site.file, "<value>"), site.line)
        chain = Tag("value", dtype, site.source, site.name, None, frame, frame, (chain,) if chain else ())
    return (chain,) if chain is not None else ()


def _live(code: Any, line: int) -> FrameType | None:
    f: FrameType | None = sys._getframe(2)
    for _ in range(64):
        if f is None:
            return None
        if f.f_code is code and f.f_lineno == line:
            return f
        f = f.f_back
    return None


_LITERAL = object()
_dtype_args: dict[tuple[int, int], Any] = {}


def _cast_dtype_expr(code: Any, line: int) -> Any:
    """The dtype expression of the cast on this line (`.to(X)`, `.to(dtype=X)`, `.type(X)`), when
    it is a name or an attribute that is not `torch.<dtype>`; _LITERAL otherwise. Cached."""
    key = (id(code), line)
    found = _dtype_args.get(key)
    if found is not None:
        return found
    found = _LITERAL
    tree = parse_line(code.co_filename, line)
    for node in ast.walk(tree) if tree is not None else ():
        if cast_call(node, DTYPE_ARGUMENT):
            expr = next(
                (kw.value for kw in node.keywords if kw.arg == "dtype"), node.args[0] if node.args else None
            )
            literal = (
                isinstance(expr, ast.Attribute)
                and isinstance(expr.value, ast.Name)
                and expr.value.id == "torch"
            )
            if isinstance(expr, (ast.Name, ast.Attribute)) and not literal:
                found = expr
                break
    _dtype_args[key] = found
    return found


def cast_value_tags(inner: Any, dtype: torch.dtype) -> tuple[Tag, ...]:
    """For a cast at the user's line `inner` (code, line): where its dtype argument was chosen."""
    expr = _cast_dtype_expr(inner[0], inner[1])
    if expr is _LITERAL:
        return ()
    frame = _live(inner[0], inner[1])
    if frame is None or _value(frame, expr) is not dtype:  # `.to(device)`, `.to(other_tensor)`
        return ()
    return value_tags(resolve(frame, expr), dtype)


def _factory_dtype_expr(code: Any, line: int) -> ast.expr | None:
    """The `dtype=` argument of a call on this line when it is a name or an attribute other than
    `torch.<dtype>` (`torch.zeros(shape, dtype=dtype)`); None otherwise."""
    tree = parse_line(code.co_filename, line)
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.Call):
            expr = next((kw.value for kw in node.keywords if kw.arg == "dtype"), None)
            literal = (
                isinstance(expr, ast.Attribute)
                and isinstance(expr.value, ast.Name)
                and expr.value.id == "torch"
            )
            if isinstance(expr, (ast.Name, ast.Attribute)) and not literal:
                return expr
    return None


def factory_value_sites(inner: Any, dtype: torch.dtype) -> list[Site]:
    """For a tensor made at the user's line `inner` (code, line) with a computed `dtype=`: the
    lines that dtype value came through, nearest first (the farthest chose it)."""
    if inner is None or not hasattr(inner[0], "co_filename"):
        return []
    expr = _factory_dtype_expr(inner[0], inner[1])
    frame = _live(inner[0], inner[1]) if expr is not None else None
    if frame is None or expr is None or _value(frame, expr) is not dtype:
        return []
    return resolve(frame, expr)


def _value(frame: FrameType, expr: ast.expr) -> Any:
    """What a name or `name.attribute` holds in the frame (attribute lookups only, no call)."""
    if isinstance(expr, ast.Name):
        return frame.f_locals.get(expr.id, frame.f_globals.get(expr.id))
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
        owner = frame.f_locals.get(expr.value.id, frame.f_globals.get(expr.value.id))
        return getattr(owner, expr.attr, None) if isinstance(owner, nn.Module) else None
    return None


def _tested_dtypes(filename: str, line: int) -> tuple[str, ...]:
    """The names whose `.dtype` an `if` around `line` tests (`if sample.dtype == np.float64:`)."""
    return _tested_at(file_stamp(filename), filename, line)


@functools.lru_cache(maxsize=256)
def _tested_at(stamp: tuple, filename: str, line: int) -> tuple[str, ...]:
    tree = source_tree(filename)
    names: list[str] = []
    for node in ast.walk(tree) if tree is not None else ():
        if not isinstance(node, ast.If) or not node.body:
            continue
        end = max(s.end_lineno or s.lineno for s in node.body)
        if not node.body[0].lineno <= line <= end:
            continue
        for sub in ast.walk(node.test):
            if isinstance(sub, ast.Attribute) and sub.attr == "dtype" and isinstance(sub.value, ast.Name):
                names.append(sub.value.id)
    return tuple(dict.fromkeys(names))


def decided_by(user: Any, dtype: torch.dtype) -> tuple[Tag, ...]:
    """A conversion at the user's line `user` (code, line) made under `if x.dtype == ...`: where
    `x` was made, which decided it (a NumPy array made float64 by default two calls up)."""
    if user is None or not hasattr(user[0], "co_filename"):
        return ()
    names = _tested_dtypes(user[0].co_filename, user[1])
    frame = _live(user[0], user[1]) if names else None
    if frame is None:
        return ()
    for name in names:
        sites = resolve(frame, ast.Name(id=name, ctx=ast.Load()))
        if sites:
            return value_tags(sites, dtype)
    return ()
