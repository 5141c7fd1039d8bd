"""Where the NumPy array a tensor was converted from was made: the birth of its dtype.

`torch.from_numpy(self.x[i])` in a Dataset's `__getitem__` keeps the array's dtype; the array was
made float64 (NumPy's default) by `np.stack(...)` in `__init__`, where `self.x` was assigned. The
conversion line only passes that dtype on: the lineage goes on to the assignment of the name (in
the function, else at module level) or of the attribute (`self.x = ...` in the class's methods), read
from the source, when the live value really is the array converted.
"""

from __future__ import annotations

import ast
from types import FrameType
from typing import Any, NamedTuple

import torch

from ..numerics.opsource import source_tree
from .dtype_values import parse_line
from .provenance import Tag
from .value_births import assigned_at


class _Code(NamedTuple):
    """What `provenance.where` reads of a code object, for a line no live frame runs."""

    co_filename: str
    co_name: str


def _argument(frame: FrameType, op: str) -> ast.expr | None:
    """The first argument of the call of `op` (its last name part) on the frame's line."""
    tree = parse_line(frame.f_code.co_filename, frame.f_lineno)
    short = op.rsplit(".", 1)[-1]
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            name = (
                func.attr
                if isinstance(func, ast.Attribute)
                else func.id
                if isinstance(func, ast.Name)
                else None
            )
            if name == short:
                return node.args[0]
    return None


def _held(expr: ast.expr) -> ast.expr:
    """`self.x` for `self.x[i]`, `a` for `a[:, 0]`: the name that holds the array."""
    while isinstance(expr, ast.Subscript):
        expr = expr.value
    return expr


def _value(frame: FrameType, expr: ast.expr) -> Any:
    if isinstance(expr, ast.Name):
        return frame.f_locals.get(expr.id, frame.f_globals.get(expr.id))
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
        owner = frame.f_locals.get(expr.value.id)
        try:
            return vars(owner).get(expr.attr) if owner is not None else None
        except TypeError:
            return None
    return None


def _attribute_assigned(filename: str, line: int, attr: str) -> int | None:
    """The line of `self.<attr> = ...` in the class whose method holds `line` (`__init__`'s first)."""
    tree = source_tree(filename)
    for cls in ast.walk(tree) if tree is not None else ():
        if not isinstance(cls, ast.ClassDef) or not cls.lineno <= line <= (cls.end_lineno or cls.lineno):
            continue
        found: list[tuple[bool, int]] = []
        for method in cls.body:
            if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(method):
                targets = (
                    node.targets
                    if isinstance(node, ast.Assign)
                    else [node.target]
                    if isinstance(node, ast.AnnAssign)
                    else []
                )
                for t in targets:
                    if (
                        isinstance(t, ast.Attribute)
                        and t.attr == attr
                        and isinstance(t.value, ast.Name)
                        and t.value.id == "self"
                    ):
                        found.append((method.name != "__init__", node.lineno))
        if found:
            return min(found)[1]
    return None


def array_birth(frame: FrameType, op: str, dtype: torch.dtype) -> Tag | None:
    """The Tag of the NumPy array the call of `op` on the frame's line converts, born where the
    name or attribute holding it was assigned; None when the source or the value does not say."""
    arg = _argument(frame, op)
    held = _held(arg) if arg is not None else None
    if held is None:
        return None
    value = _value(frame, held)
    if type(value).__name__ != "ndarray" or str(getattr(value, "dtype", "")) != str(dtype).removeprefix(
        "torch."
    ):
        return None
    filename = frame.f_code.co_filename
    if isinstance(held, ast.Name):
        found = assigned_at(filename, frame.f_lineno, held.id)
        line = found[0] if found is not None else None
    elif isinstance(held, ast.Attribute):
        line = _attribute_assigned(filename, frame.f_lineno, held.attr)
    else:
        line = None
    if line is None:
        return None
    at = (_Code(filename, "<array>"), line)
    return Tag("array", dtype, "numpy array", ast.unparse(held), None, at, at)
