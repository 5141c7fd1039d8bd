"""The fixes a report shows, as edits: each Python fix with a place in a user file is pasted there by
the rule a user follows (paste.py), so that what `--write` writes is what the report shows. And the
lineage order that candidates are tried in: edits at the earliest birth of the odd dtype first.

The place is the fix's own `file`/`line`; else the last `FILE.py:LINE` its title names (a file the
finding touches); else, said in the title, the finding's own line in a user file. No torch import.
"""

from __future__ import annotations

import ast
import bisect
import os
import re
import textwrap
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from ..causes import root_origin
from ..editing.paste import code_lines, parts, paste_span
from ..editing.source import Edit, Source
from ..remedies.scope import unbound_at, unresolved
from ..report import Finding, Fix, Origin, Severity

_PLACE = re.compile(r"([\w./\\-]+\.py):(\d+)")
_LOW = re.compile(r"\b(float16|bfloat16|half)\b|\.half\(\)|\.bfloat16\(\)")
# a statement that makes a tensor wide on purpose: `.float()`, `.double()`, `dtype=torch.float32`
_WIDE = re.compile(
    r"\.(float|double)\(\)|\b(torch\.)?(float32|float64|float|double)\b\s*\)|dtype\s*=\s*torch\.(float32|float64)"
)
UNKNOWN = 3  # the rank of an edit at no line of the lineage


@dataclass(frozen=True)
class Shown:
    """A shown fix made an edit: its title (with where it is pasted, when the fix named no place)."""

    title: str
    edit: Edit
    line: int
    failed: bool  # the tool's own replay of it failed
    stated: bool  # at the place the fix states (else at a birth or the finding's line)
    more: tuple[Edit, ...] = ()  # the later parts of a fix that edits several places
    fix: Fix | None = None  # the report's fix it was made from


def finding_files(f: Finding) -> list[str]:
    """The files the finding touches: its location, its user call line, its operands' origins."""
    files: list[str] = []
    if f.location is not None and f.location.file:
        files.append(f.location.file)
    your = f.data.get("your_code")
    if isinstance(your, str) and ":" in your:
        files.append(your.rpartition(":")[0])
    todo = [o.origin for o in f.operands if o.origin is not None]
    while todo:
        origin = todo.pop(0)
        if origin.file:
            files.append(origin.file)
        todo.extend(origin.chain)
    return list(dict.fromkeys(files))


def _resolve(named: str, known: list[str], source: Callable[[str], Source | None]) -> Source | None:
    """The user file `named` means: itself, else a file the finding touches with that path's tail."""
    if source(named) is not None:
        return source(named)
    tail = named.replace("\\", "/").lstrip("./")
    for path in known:
        if path.replace("\\", "/").endswith("/" + tail) or os.path.basename(path) == tail:
            src = source(path)
            if src is not None:
                return src
    return None


def place(
    f: Finding, fix: Fix, source: Callable[[str], Source | None], births: list[Origin]
) -> tuple[Source, int, bool] | None:
    """(file, line, stated) where the fix is pasted; `stated` False: the fix states none, and it goes
    at the earliest user-file birth of an odd operand's dtype (`births`), else at the finding's line."""
    known = finding_files(f)
    if fix.file and fix.line:
        src = _resolve(fix.file, known, source)
        if src is not None:
            return src, fix.line, True
    for named, line in reversed(_PLACE.findall(fix.title)):
        src = _resolve(named, known, source)
        if src is not None:
            return src, int(line), True
    loc = f.location
    for origin in [*births, *([loc] if loc is not None else [])]:
        src = source(origin.file) if origin.file and origin.line else None
        if src is not None and origin.line is not None:
            return src, origin.line, False
    return None


def shown_fixes(
    f: Finding, source: Callable[[str], Source | None], births: Sequence[Origin] = ()
) -> Iterator[Shown]:
    """Each Python fix of an error or warning finding, with code and a place in a user file, pasted
    (`births`: where the odd operands' dtypes were born, for a fix that states no place)."""
    if f.severity not in (Severity.ERROR, Severity.WARNING):
        return
    for fix in f.fixes:
        if fix.language != "python" or not code_lines(fix.snippet):
            continue
        where = place(f, fix, source, list(births))
        if where is None:
            continue
        src, line, stated = where
        edits = _part_edits(f, fix.snippet.strip("\n"), src, line, source)
        if not edits:
            continue  # a part names what its place lacks, does not paste, or lowers a float32 region
        title = fix.title
        if not stated:
            title += f" (pasted at {src.path}:{line}: the fix states no place)"
        elif f"{os.path.basename(src.path)}:{line}" not in title:
            title += f" ({src.path}:{line})"
        yield Shown(title, edits[0], line, fix.verified is False, stated, tuple(edits[1:]), fix)


def _part_edits(
    f: Finding, snippet: str, src: Source, line: int, source: Callable[[str], Source | None]
) -> list[Edit]:
    """One edit per part of the snippet (paste.parts): the first at (src, line), each later one at the
    FILE:LINE that heads it. Empty when a part names what its place lacks, does not paste, or casts a
    deliberate float32 region down."""
    edits: list[Edit] = []
    for named, at, code in parts(snippet):
        where = _resolve(named, finding_files(f), source) if named else src
        at = at or line
        if where is None or lowers(where, at, code) or not_a_cure(code):
            return []
        if unresolved(code, where.path, at) or unbound_at(where.path, at, code):
            return []  # a NameError, an UnboundLocalError, or a result nothing reads
        try:
            start, end, text = paste_span(where.text, at, code)
        except (SyntaxError, IndexError, ValueError):
            return []
        edits.append(Edit(where.path, start, end, text))
    return edits


def not_a_cure(code: str) -> bool:
    """The snippet cannot cure a run: it passes `...` to a call (`torch.zeros(..., dtype=d)`, a shape
    of code for a person to fill in), or it only asserts (a check that fails earlier, not a fix)."""
    try:
        tree = ast.parse(textwrap.dedent(code))
    except SyntaxError:
        return False
    if tree.body and all(isinstance(stmt, ast.Assert) for stmt in tree.body):
        return True
    return any(
        isinstance(a, ast.Constant) and a.value is Ellipsis
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        for a in [*node.args, *(k.value for k in node.keywords)]
    )


def lowers(src: Source, line: int, snippet: str) -> bool:
    """The snippet casts to a half dtype at a statement that makes its tensor wide on purpose (a
    `.float()`, `dtype=torch.float32`): it would lower a deliberate float32 region."""
    stmt = src.statement_at(line)
    if stmt is None or not _LOW.search("\n".join(code_lines(snippet))):
        return False
    rows = src.lines[stmt.lineno - 1 : stmt.end_lineno or stmt.lineno]
    own = "".join(row.split("#")[0] for row in rows)
    return bool(_WIDE.search(own))


def lineage(f: Finding) -> dict[tuple[str, int], int]:
    """(file, line) -> rank along the odd dtype's lineage: 0 the root births of the operands, 1 the
    other places their origins passed, 2 where the finding surfaced (its line, the user's call)."""
    ranks: dict[tuple[str, int], int] = {}

    def put(file: str | None, line: int | None, rank: int) -> None:
        if file and line:
            key = (os.path.realpath(file), line)
            ranks[key] = min(rank, ranks.get(key, rank))

    todo: list[Origin] = []
    for o in f.operands:
        if o.origin is not None:
            root = root_origin(o.origin)
            put(root.file, root.line, 0)
            todo.append(o.origin)
    while todo:
        origin = todo.pop(0)
        put(origin.file, origin.line, 1)
        todo.extend(origin.chain)
    if f.location is not None:
        put(f.location.file, f.location.line, 2)
    your = f.data.get("your_code")
    if isinstance(your, str) and your.rpartition(":")[2].isdigit():
        put(your.rpartition(":")[0], int(your.rpartition(":")[2]), 2)
    return ranks


def edit_line(src: Source, edit: Edit) -> int:
    """The 1-based line an edit starts on."""
    starts = [0]
    for line in src.lines:
        starts.append(starts[-1] + len(line))
    return max(1, bisect.bisect_right(starts, edit.start))


def rank(ranks: dict[tuple[str, int], int], path: str, line: int) -> int:
    return ranks.get((os.path.realpath(path), line), UNKNOWN)
