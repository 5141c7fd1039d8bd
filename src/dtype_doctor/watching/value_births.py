"""Where a Python number that a dtype cannot hold was set: the birth of a value, not of a tensor.

`torch.full(shape, fill_value=d_min, dtype=torch.float16)` raises because `d_min` is -3.4e38: the
failing line only passes the number on. The number was chosen where the name was assigned (`d_min =
torch.finfo(x.dtype).min`, the limit of another dtype): that statement is the root. Read from the
failing frame (the value of each name on the failing line) and the source (the last assignment of
that name before the line, in the same function, else at module level).
"""

from __future__ import annotations

import ast
import linecache
import re
from types import FrameType

import torch

from ..numerics.opsource import source_tree
from ..report import Operand, Origin
from .provenance import short_path

_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def _scope(tree: ast.Module, line: int) -> ast.AST:
    """The innermost function whose body holds `line` (the module when none does)."""
    found: ast.AST = tree
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            end = node.end_lineno or node.lineno
            if node.lineno <= line <= end and (found is tree or node.lineno >= found.lineno):  # type: ignore[attr-defined]
                found = node
    return found


def _statements(scope: ast.AST) -> list[ast.stmt]:
    """The statements of `scope`, nested blocks included, nested functions and classes not."""
    out: list[ast.stmt] = []
    todo = list(getattr(scope, "body", []))
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        out.append(node)
        for name in ("body", "orelse", "finalbody", "handlers"):
            todo.extend(getattr(node, name, []))
    return out


def _targets(stmt: ast.stmt) -> list[str]:
    if isinstance(stmt, ast.Assign):
        nodes: list[ast.expr] = list(stmt.targets)
    elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
        nodes = [stmt.target]
    else:
        return []
    names = []
    while nodes:  # names bound, not those read in a subscript or an attribute target
        node = nodes.pop()
        if isinstance(node, ast.Name):
            names.append(node.id)
        elif isinstance(node, (ast.Tuple, ast.List)):
            nodes.extend(node.elts)
        elif isinstance(node, ast.Starred):
            nodes.append(node.value)
    return names


def assigned_at(filename: str, line: int, name: str) -> tuple[int, str] | None:
    """(line, source) of the last assignment of `name` before `line`, in its function or else at
    module level; None when the source does not say."""
    tree = source_tree(filename)
    if tree is None:
        return None
    for scope in (_scope(tree, line), tree):
        found = [s for s in _statements(scope) if s.lineno < line and name in _targets(s)]
        if found:
            stmt = max(found, key=lambda s: s.lineno)
            return stmt.lineno, (ast.get_source_segment("".join(linecache.getlines(filename)), stmt) or "")
        if scope is tree:
            break
    return None


def _names_on_line(filename: str, line: int) -> list[str]:
    tree = source_tree(filename)
    if tree is None:
        return []
    found = (n for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load))
    return list(dict.fromkeys(n.id for n in found if n.lineno == line))


_TORCH_NAMES = {"Half": "float16", "BFloat16": "bfloat16", "Float": "float32"}


def target_dtype(operands: list[Operand], text: str) -> str | None:
    """The dtype a number had to fit: a `target` operand's, the one torch's message names
    (`type c10::Half`), else the first low-precision operand's."""
    found = next((o.dtype for o in operands if o.role == "target"), None)
    if found:
        return found
    named = re.search(r"type (?:c10|at)::(\w+)", text)
    if named and named.group(1) in _TORCH_NAMES:
        return _TORCH_NAMES[named.group(1)]
    return next((o.dtype for o in operands if o.dtype in ("float16", "bfloat16")), None)


def _too_big(value: object, dtype: torch.dtype) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    biggest = torch.finfo(dtype).max
    return abs(float(value)) > biggest and abs(float(value)) != float("inf")


def out_of_range(frame: FrameType, line: int, target: str | None) -> list[Operand]:
    """An operand for each name on the failing line whose number `target` cannot hold, its origin
    the statement that set it."""
    dtype = _DTYPES.get(target or "")
    if dtype is None:
        return []
    filename = frame.f_code.co_filename
    out = []
    for name in _names_on_line(filename, line):
        value = frame.f_locals.get(name, frame.f_globals.get(name))
        if not _too_big(value, dtype):
            continue
        found = assigned_at(filename, line, name)
        if found is None:
            continue
        at, source = found
        # kind "value": a Python number, which no tensor cast fixes (causes.root_fix writes none)
        kind = type(value).__name__
        origin = Origin(
            kind="value", name=name, op=source.strip(), file=short_path(filename), line=at, dtype=kind
        )
        out.append(Operand(role=f"value {name}", dtype=kind, name=f"{value:.3g}", origin=origin))
    return out
