"""The `with torch.autocast(...)` region an op ran in: the place autocast's dtype was asked for.

An op whose output dtype autocast chose (a matmul made bfloat16) has two places the user can act
on: the op's own line and the region that enabled autocast around it, often in another function or
file (the training loop's `with torch.autocast(...)`, a `@torch.autocast(...)` decorator). The
region is found from the frames on the stack: the innermost frame whose line lies in the body of a
`with` whose item calls `...autocast(...)` (not `enabled=False`), or in a function decorated so.
Source parses are cached per file, answers per (code, line).
"""

from __future__ import annotations

import ast
import sys
from types import CodeType

from ..editing.source import current_lines, file_stamp
from .provenance import Frame, frame_kind

Span = tuple[int, int, int, str]  # first body line, last line, the region's own line, its text
_spans: dict[tuple, list[Span]] = {}  # by file version: an edited file is read again
_answers: dict[tuple[int, int], tuple[int, str] | None] = {}
_kept: list[CodeType] = []  # codes keyed by id above stay alive
_MAX_FRAMES = 64


def _is_autocast(expr: ast.expr) -> bool:
    """`torch.autocast(...)`, `torch.amp.autocast(...)`, `torch.cuda.amp.autocast()`,
    `accelerator.autocast()`: a call of something named autocast that does not disable it."""
    if not isinstance(expr, ast.Call):
        return False
    func = expr.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    if name != "autocast":
        return False
    for k in expr.keywords:
        if k.arg == "enabled" and isinstance(k.value, ast.Constant) and not k.value.value:
            return False
    return True


def _file_spans(filename: str) -> list[Span]:
    version = file_stamp(filename)
    spans = _spans.get(version)
    if spans is not None:
        return spans
    spans = []
    try:
        tree = ast.parse("".join(current_lines(filename)))
    except (SyntaxError, ValueError):
        tree = None
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, (ast.With, ast.AsyncWith)) and node.body:
            for item in node.items:
                if _is_autocast(item.context_expr):
                    text = "with " + ast.unparse(item.context_expr)
                    spans.append((node.body[0].lineno, node.end_lineno or node.lineno, node.lineno, text))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            for dec in node.decorator_list:
                if _is_autocast(dec):
                    spans.append(
                        (
                            node.body[0].lineno,
                            node.end_lineno or node.lineno,
                            dec.lineno,
                            "@" + ast.unparse(dec),
                        )
                    )
    _spans[version] = spans
    return spans


def region_at(code: CodeType, line: int) -> tuple[int, str] | None:
    key = (id(code), line)
    if key in _answers:
        return _answers[key]
    best: Span | None = None
    for span in _file_spans(code.co_filename):
        if span[0] <= line <= span[1] and (best is None or span[0] > best[0]):
            best = span
    found = (best[2], best[3]) if best is not None else None
    if len(_answers) < 65536:
        _answers[key] = found
        _kept.append(code)
    return found


def enclosing_region(depth: int = 2) -> tuple[Frame, str] | None:
    """((code, line of the `with`/decorator), its source text) of the innermost autocast region of
    the user's own code (or a library's) that the calling frame runs in; None when none is written."""
    try:
        f = sys._getframe(depth)
    except ValueError:
        return None
    for _ in range(_MAX_FRAMES):
        if f is None:
            return None
        code = f.f_code
        if frame_kind(code) and not code.co_filename.startswith("<"):
            found = region_at(code, f.f_lineno)
            if found is not None:
                return (code, found[0]), found[1]
        f = f.f_back
    return None
