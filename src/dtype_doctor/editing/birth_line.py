"""A line of the user's code rewritten so that the tensor it makes or reads has another dtype: the
shown fix at a birth (`torch.as_tensor(w)` → `torch.as_tensor(w, dtype=torch.float32)`) or at a read
(`self.cache[pos]` → `self.cache[pos].to(q.dtype)`), as the whole statement, which the paste rule
puts in place of the line. No torch import.
"""

from __future__ import annotations

import ast

from . import finders as find
from .source import FACTORIES, Edit, Source, add_kwarg, apply, call_name, castable
from .user_files import is_user_file


def user_source(path: str | None) -> Source | None:
    if not is_user_file(path):
        return None
    try:
        src = Source.read(str(path))
        src.tree  # noqa: B018 (a file that does not parse is not rewritten)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None
    return src


def _simple(src: Source, line: int) -> ast.stmt | None:
    """The statement holding `line`, when it is a simple one (not a block: `if`, `for`, `with`...)."""
    stmt = src.statement_at(line)
    return None if stmt is None or hasattr(stmt, "body") else stmt


def _cast_after(src: Source, node: ast.expr, dtype: str) -> Edit:
    """`.to(DTYPE)` written after `node` (a call, an attribute, a subscript: no parentheses needed)."""
    _, end = src.span(node)
    return Edit(src.path, end, end, f".to({dtype})")


def _statement(src: Source, stmt: ast.stmt, edits: list[Edit]) -> str:
    start, end = src.span(stmt)
    moved = [Edit(e.path, e.start - start, e.end - start, e.text) for e in edits]
    return apply(src.text[start:end], moved)


def made_in(path: str | None, line: int, op: str, dtype: str) -> tuple[str, int] | None:
    """(the statement at `line` with every call of `op` on that line making its tensor in `dtype`,
    the statement's first line), or None: `dtype=` into a torch factory written without one, else
    `.to(dtype)` after the call. A call written with its own `dtype=` is the user's choice: None."""
    src = user_source(path)
    stmt = _simple(src, line) if src is not None else None
    if src is None or stmt is None:
        return None
    short = op.rsplit(".", 1)[-1]
    calls = [c for c in find.calls_on(src, line) if call_name(c.func).rsplit(".", 1)[-1] == short]
    if not calls or any(find.explicit_dtype(c) for c in calls):
        return None
    parents = _parents(stmt)
    edits: list[Edit] = []
    for call in calls:
        edit = add_kwarg(src, call, "dtype", dtype) if short in FACTORIES else None
        edits.append(edit or _cast_after(src, _taken(call, parents), dtype))
    return _statement(src, stmt, edits), stmt.lineno


def _parents(stmt: ast.stmt) -> dict[int, ast.AST]:
    return {id(child): node for node in ast.walk(stmt) for child in ast.iter_child_nodes(node)}


def _taken(node: ast.expr, parents: dict[int, ast.AST]) -> ast.expr:
    """What the statement takes from a call's result: the result indexed (`torch.load(f)["w"]`, a dict's
    tensor) or with methods called on it (`from_numpy(a).cuda()`), outermost."""
    while True:
        outer = parents.get(id(node))
        if isinstance(outer, ast.Subscript) and outer.value is node:
            node = outer
        elif isinstance(outer, ast.Attribute) and isinstance(parents.get(id(outer)), ast.Call):
            call = parents[id(outer)]
            if not isinstance(call, ast.Call) or call.func is not outer:
                return node
            node = call
        else:
            return node


def read_cast(path: str | None, line: int, attribute: str, dtype: str) -> tuple[str, int] | None:
    """(the statement at `line` with its read of `self.ATTRIBUTE` cast to `dtype`, the statement's
    first line), or None: the subscript read when it is indexed (`self.cache[pos].to(...)`: only
    the rows used are cast), else the attribute itself."""
    src = user_source(path)
    stmt = _simple(src, line) if src is not None else None
    if src is None or stmt is None:
        return None
    parents = _parents(stmt)
    for node in ast.walk(stmt):
        if isinstance(node, ast.Attribute) and node.attr == attribute and isinstance(node.ctx, ast.Load):
            read: ast.expr = node
            outer = parents.get(id(node))
            if isinstance(outer, ast.Subscript) and outer.value is node:
                read = outer
            if not castable(read):
                return None
            return _statement(src, stmt, [_cast_after(src, read, dtype)]), stmt.lineno
    return None
