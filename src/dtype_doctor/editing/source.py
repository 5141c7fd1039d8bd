"""A user's source file and the edits on it, by `ast` positions: every byte outside an edit is kept
(formatting, comments, quotes), an edit replaces one exact span. No torch import."""

from __future__ import annotations

import ast
import difflib
import io
import linecache
import os
import tokenize
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


def python_encoding(raw: bytes) -> str:
    """The encoding Python reads these bytes of source in: a coding cookie, `utf-8-sig` for a UTF-8 BOM,
    else UTF-8 (SyntaxError for an unknown cookie)."""
    return tokenize.detect_encoding(io.BytesIO(raw).readline)[0]


def read_python(path: str) -> tuple[str, str]:
    """(text, encoding) of a source file, decoded as Python decodes it; line ends kept as they are."""
    with open(path, "rb") as fh:
        raw = fh.read()
    encoding = python_encoding(raw)
    return raw.decode(encoding), encoding


def file_stamp(path: str) -> tuple:
    """What tells one version of a file from another: its absolute path, modification time and size.
    A cache keyed on the bare name would hand back the tree of a file edited since (`run --write`),
    or of another directory's file of that name (report places are relative to where the run was)."""
    full = os.path.abspath(path)
    try:
        stat = os.stat(full)
    except (OSError, ValueError):
        return (path,)  # not on disk (a notebook cell's name): linecache holds its one version
    return (full, stat.st_mtime_ns, stat.st_size)


def current_lines(file: str) -> list[str]:
    """`linecache.getlines`, after dropping a cached copy that no longer matches the file on disk."""
    linecache.checkcache(file)
    return linecache.getlines(file)


def encoding_of(path: str) -> str:
    """The encoding of a source file on disk (UTF-8 when it cannot be read)."""
    try:
        return read_python(path)[1]
    except (OSError, SyntaxError, UnicodeDecodeError):
        return "utf-8"


class Source:
    """One file's text and tree, with ast positions turned into character offsets."""

    def __init__(self, path: str, text: str, encoding: str = "utf-8") -> None:
        self.path = path
        self.text = text
        self.encoding = encoding  # written back in it (a BOM stays, a latin-1 file stays latin-1)
        self.lines = text.splitlines(keepends=True)
        self._starts = [0]
        for line in self.lines:
            self._starts.append(self._starts[-1] + len(line))

    @classmethod
    def read(cls, path: str) -> Source:
        text, encoding = read_python(path)
        return cls(path, text, encoding)

    @cached_property
    def newline(self) -> str:
        """The file's line end (its first line's): what an inserted line ends with."""
        return "\r\n" if self.lines and self.lines[0].endswith("\r\n") else "\n"

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


def git_top(folder: str) -> str | None:
    """The top folder of the git work tree holding `folder` (None outside one, or without git)."""
    from .git import git

    top = git(folder, "rev-parse", "--show-toplevel")
    return top.strip() or None if top else None


def diff_path(path: str) -> str:
    """The name a patch gives a file: relative to its git repository's top (where `git apply` and
    `patch -p1` run), else to the working directory when under it, else absolute."""
    full = os.path.abspath(path)
    top = git_top(os.path.dirname(full)) if os.path.isdir(os.path.dirname(full)) else None
    for base in (top, os.getcwd()):
        if base:
            rel = os.path.relpath(full, base)
            if not rel.startswith(os.pardir):
                return rel.replace(os.sep, "/")
    return full


def unified_diff(path: str, before: str, after: str, encoding: str = "utf-8") -> str:
    """A git-style diff of one file (`a/NAME`, `b/NAME`: `git apply` and `patch -p1` apply it), the
    name from `diff_path`; a name with a blank ends with a tab, as GNU diff writes it. A file with a
    BOM (`encoding` utf-8-sig) shows it on its first line, so the diff's bytes (`diff_bytes`) match
    the file's."""
    path = diff_path(path)
    if encoding == "utf-8-sig":
        before, after = "\ufeff" + before, "\ufeff" + after
    tab = "\t" if any(c.isspace() for c in path) else ""
    lines = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        f"a/{path}{tab}",
        f"b/{path}{tab}",
        n=3,
        lineterm="\n",
    )
    out = []
    for line in lines:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def diff_bytes(path: str, before: str, after: str, encoding: str) -> bytes:
    """`unified_diff` in the file's own bytes (a latin-1 file's diff in latin-1): what `patch` applies."""
    codec = "utf-8" if encoding == "utf-8-sig" else encoding
    return unified_diff(path, before, after, encoding).encode(codec, errors="surrogateescape")


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


def castable(node: ast.expr) -> bool:
    """`.to(...)` after `node` can work: not a Python list, tuple, dict, set, comprehension or literal."""
    plain = (
        ast.List,
        ast.Tuple,
        ast.Dict,
        ast.Set,
        ast.ListComp,
        ast.SetComp,
        ast.DictComp,
        ast.GeneratorExp,
    )
    return not isinstance(node, (*plain, ast.Constant, ast.JoinedStr, ast.Lambda))


def cast_expr(src: Source, node: ast.expr, dtype: str, to: str | None = None) -> Edit:
    """`EXPR` → `EXPR.to(torch.DTYPE)` (parenthesised when it is not an atom); `to`: the dtype as an
    expression instead (`self.out.weight.dtype`: the cast follows the consumer's dtype)."""
    start, end = src.span(node)
    text = src.text[start:end]
    if not is_atom(node):
        text = f"({text})"
    return Edit(src.path, start, end, f"{text}.to({to or f'torch.{dtype}'})")


def add_kwarg(src: Source, call: ast.Call, name: str, value: str, beside_kwargs: bool = False) -> Edit | None:
    """`f(1, 2)` → `f(1, 2, NAME=VALUE)`, in the call's own layout; None when it has NAME, or **kw
    (unless `beside_kwargs`: a re-run tells whether **kw carried NAME too)."""
    if any(k.arg == name or (k.arg is None and not beside_kwargs) for k in call.keywords):
        return None
    _, end = src.span(call)
    before = src.text[: end - 1].rstrip()  # up to the `)`
    sep = "" if before.endswith("(") else " " if before.endswith(",") else ", "
    return Edit(src.path, len(before), len(before), f"{sep}{name}={value}")
