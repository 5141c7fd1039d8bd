"""A user's source file and the edits on it, by `ast` positions: every byte outside an edit is kept
(formatting, comments, quotes), an edit replaces one exact span. No torch import."""

from __future__ import annotations

import ast
import difflib
import os
from dataclasses import dataclass
from functools import cached_property

# torch functions that make a tensor and take `dtype=`: the cast goes into the call itself
_FACTORY_NAMES = "ones zeros full empty rand randn randint arange linspace logspace eye tensor as_tensor"
FACTORIES = frozenset(_FACTORY_NAMES.split()) | {
    f"{n}_like" for n in ("ones", "zeros", "full", "empty", "rand", "randn")
}


@dataclass(frozen=True)
class Edit:
    """Replace text[start:end] of `path` with `text` (character offsets)."""

    path: str
    start: int
    end: int
    text: str


class Source:
    """One file's text and tree, with ast positions turned into character offsets."""

    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.text = text
        self.lines = text.splitlines(keepends=True)
        self._starts = [0]
        for line in self.lines:
            self._starts.append(self._starts[-1] + len(line))

    @classmethod
    def read(cls, path: str) -> Source:
        with open(path, encoding="utf-8", newline="") as fh:  # line ends kept as they are
            return cls(path, fh.read())

    @cached_property
    def tree(self) -> ast.Module:
        return ast.parse(self.text)

    def offset(self, lineno: int, col_bytes: int) -> int:
        """Character offset of an ast (1-based line, UTF-8 byte column) position."""
        line = self.lines[lineno - 1] if lineno - 1 < len(self.lines) else ""
        return self._starts[lineno - 1] + len(line.encode("utf-8")[:col_bytes].decode("utf-8", "replace"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        return self.offset(node.lineno, node.col_offset), self.offset(node.end_lineno, node.end_col_offset)

    def segment(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.text[start:end]

    def indent(self, lineno: int) -> str:
        line = self.lines[lineno - 1]
        return line[: len(line) - len(line.lstrip())]

    def nodes(self, kind: type | tuple[type, ...]) -> list[ast.AST]:
        return [n for n in ast.walk(self.tree) if isinstance(n, kind)]

    def statement_at(self, lineno: int, outermost: bool = False) -> ast.stmt | None:
        """The innermost (or outermost) statement whose lines hold `lineno`."""
        around = [
            n
            for n in ast.walk(self.tree)
            if isinstance(n, ast.stmt) and n.lineno <= lineno <= (n.end_lineno or n.lineno)
        ]
        if not around:
            return None
        size = [(n.end_lineno or n.lineno) - n.lineno for n in around]
        pick = max(range(len(around)), key=lambda i: size[i] if outermost else -size[i])
        return around[pick]


def apply(text: str, edits: list[Edit]) -> str:
    """The text with the edits made (they must not overlap); later spans first keeps offsets valid."""
    for edit in sorted(edits, key=lambda e: (e.start, e.end), reverse=True):
        text = text[: edit.start] + edit.text + text[edit.end :]
    return text


def unified_diff(path: str, before: str, after: str) -> str:
    """A `patch -p0` / `git apply -p0` diff of one file; a path under the working directory is shown
    relative to it (patch ignores absolute names), others as given."""
    if os.path.isabs(path):
        rel = os.path.relpath(path)
        path = path if rel.startswith(os.pardir) else rel
    lines = difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True), f"{path}.orig", path, n=3
    )
    out = []
    for line in lines:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    text = "".join(out)
    return text.replace(f"--- {path}.orig\n", f"--- {path}\n", 1)


def call_name(node: ast.expr) -> str:
    """`torch.ones` for torch.ones(...), `model` for model(...), '' when not a plain name."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def is_atom(node: ast.expr) -> bool:
    """`node.to(...)` can be written after it without parentheses."""
    return isinstance(node, (ast.Call, ast.Attribute, ast.Name, ast.Subscript))


def cast_expr(src: Source, node: ast.expr, dtype: str) -> Edit:
    """`EXPR` → `EXPR.to(torch.DTYPE)` (parenthesised when it is not an atom)."""
    start, end = src.span(node)
    text = src.text[start:end]
    if not is_atom(node):
        text = f"({text})"
    return Edit(src.path, start, end, f"{text}.to(torch.{dtype})")


def add_kwarg(src: Source, call: ast.Call, name: str, value: str) -> Edit | None:
    """`f(1, 2)` → `f(1, 2, NAME=VALUE)`, in the call's own layout; None when it has NAME or **kw."""
    if any(k.arg in (name, None) for k in call.keywords):
        return None
    _, end = src.span(call)
    before = src.text[: end - 1].rstrip()  # up to the `)`
    sep = "" if before.endswith("(") else " " if before.endswith(",") else ", "
    return Edit(src.path, len(before), len(before), f"{sep}{name}={value}")
