"""Where a remedy's snippet is pasted: the user's lines a producer hands the processor as evidence.

A fix is pasted *at* a line: before it, or instead of it when the snippet assigns what the line
assigns (`x = x.to(...)` after the line that makes `x`). Producers know a few places while the
program runs (`Places`); the kind of place a remedy needs follows from the names its snippet
reads (`kind_of`): the odd tensor's name exists where the user passes it, the model's after the
user built and converted it, the loss where backward is called. The static helpers here read the
user's source (no torch import).
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from ..editing.source import file_stamp, read_python

# the kinds of place, and the evidence names a snippet reads that need each
INPUT, CALL, MODEL, BIRTH, LOSS, OP = "input", "call", "model", "birth", "loss", "op"
_READS = (
    (INPUT, ("{tensor}", "{input}", "{array}", "{passed}")),
    (MODEL, ("{model}", "{module_ref}", "{paths}", "{keep", "{modules}", "{path")),
)
_WORDS = ((LOSS, re.compile(r"\b(loss|scaler|optimizer)\b")), (MODEL, re.compile(r"\bmodel\b")))


@dataclass(frozen=True)
class Place:
    """One line of the user's code: `file` as reports show it, `line` 1-based."""

    file: str
    line: int


Places = Mapping[str, Place]


def kind_of(snippet: str) -> str:
    """The place a snippet template needs, from the names it reads ("" when it reads none)."""
    for kind, fields in _READS:
        if any(f in snippet for f in fields):
            return kind
    code = "\n".join(line.partition("#")[0] for line in snippet.splitlines())
    for kind, word in _WORDS:
        if word.search(code):
            return kind
    return ""


def tree_of(path: str) -> ast.Module | None:
    return parsed_tree(file_stamp(path))


@functools.lru_cache(maxsize=64)
def parsed_tree(stamp: tuple) -> ast.Module | None:
    try:
        return ast.parse(read_python(stamp[0])[0])
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return None


def _blocks(node: ast.AST) -> Iterator[list[ast.stmt]]:
    for name in ("body", "orelse", "finalbody", "handlers"):
        block = getattr(node, name, None)
        if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
            yield block


def _enclosing(tree: ast.Module, line: int) -> list[list[ast.stmt]]:
    """The statement lists from the module down to the innermost one holding `line`."""
    out: list[list[ast.stmt]] = []
    blocks = [tree.body]
    while blocks:
        block = blocks.pop()
        inside = [s for s in block if s.lineno <= line <= (s.end_lineno or s.lineno)]
        out.append(block)
        for stmt in inside:
            blocks.extend(_blocks(stmt))
            for handler in getattr(stmt, "handlers", []):
                blocks.extend(_blocks(handler))
    return out


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute | ast.Subscript | ast.Call):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _sets(stmt: ast.stmt, name: str) -> bool:
    """`stmt` makes or converts `name`: assigns it, or calls a method on it as a statement."""
    if isinstance(stmt, ast.Assign | ast.AnnAssign | ast.AugAssign):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        return any(isinstance(t, ast.Name) and t.id == name for t in targets)
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        return _root_name(stmt.value.func) == name
    return False


def statement_line(path: str, line: int) -> int:
    """The first line of the innermost statement holding `line` (a call written over lines)."""
    tree = tree_of(path)
    if tree is None:
        return line
    stmts = [
        s for block in _enclosing(tree, line) for s in block if s.lineno <= line <= (s.end_lineno or s.lineno)
    ]
    inner = min(stmts, key=lambda s: (s.end_lineno or s.lineno) - s.lineno, default=None)
    return inner.lineno if inner is not None else line


def after_built(path: str, name: str, before: int) -> int | None:
    """The line of the statement that follows the last one making or converting `name` (the model,
    `model = Net()` then `model.half()`) before line `before`, in the blocks around it: a snippet
    that reads `name` pasted there sees the model as the program will use it. None when no
    statement of those blocks makes `name`: then the first line of the function that takes it as a
    parameter, or None (it comes from elsewhere: a global made in another file)."""
    tree = tree_of(path)
    if tree is None:
        return None
    best: ast.stmt | None = None
    following: int | None = None
    for block in _enclosing(tree, before):
        for i, stmt in enumerate(block):
            if stmt.lineno >= before:
                break
            if (stmt.end_lineno or stmt.lineno) < before and _sets(stmt, name):  # later blocks: later lines
                best = stmt
                following = block[i + 1].lineno if i + 1 < len(block) else None
    if best is None:
        return _parameter_start(tree, name, before)
    return following if following is not None else before


def _parameter_start(tree: ast.Module, name: str, line: int) -> int | None:
    """The first statement of the innermost function around `line` that takes `name` as a
    parameter (the model handed to a training function exists from its first line), else None."""
    found = None
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.lineno < line <= (
            node.end_lineno or 0
        ):
            args = node.args
            params = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
            if name in params and (found is None or node.lineno > found.lineno):
                found = node
    if found is None:
        return None
    body = found.body
    docstring = isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and len(body) > 1
    return body[1 if docstring else 0].lineno


def backward_line(path: str, after: int = 0) -> int | None:
    """The first `… .backward(…)` statement of the file at or after line `after` (else the first)."""
    tree = tree_of(path)
    if tree is None:
        return None
    found = sorted(
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Attribute)
        and node.value.func.attr == "backward"
    )
    later = [n for n in found if n >= after]
    return (later or found or [None])[0]


def assignment_of(path: str, target: str, before: int) -> tuple[int, str] | None:
    """(line, source text) of the statement that assigns `target` (`opt`, `self.optimizer`) and that
    the program ran before line `before`: the last one before it in the blocks around it, else the
    only one in the file (an attribute set in `__init__`, read in a training method)."""
    tree = tree_of(path)
    if tree is None:
        return None

    def assigns(stmt: ast.stmt) -> bool:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
        return isinstance(stmt, ast.Assign | ast.AnnAssign) and any(
            t is not None and ast.unparse(t) == target for t in targets
        )

    near = [
        stmt
        for block in _enclosing(tree, before)
        for stmt in block
        if (stmt.end_lineno or stmt.lineno) < before and assigns(stmt)
    ]
    anywhere = [node for node in ast.walk(tree) if isinstance(node, ast.stmt) and assigns(node)]
    found = max(near, key=lambda s: s.lineno) if near else (anywhere[0] if len(anywhere) == 1 else None)
    if found is None:
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            text = ast.get_source_segment(fh.read(), found)
    except (OSError, ValueError):
        return None
    return (found.lineno, text) if text else None


def trained_module(statement: str) -> str | None:
    """`model` in `opt = Adam(model.parameters(), ...)`: the expression whose parameters (or
    named_parameters) an optimizer's construction statement hands it, as written (None: none)."""
    try:
        tree = ast.parse(statement)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        func = node.func if isinstance(node, ast.Call) else None
        if isinstance(func, ast.Attribute) and func.attr in ("parameters", "named_parameters"):
            return ast.unparse(func.value)
    return None
