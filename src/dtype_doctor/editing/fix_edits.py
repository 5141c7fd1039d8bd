"""A fix's edits in ruff's JSON shape, and back: the one form every consumer of a fix reads.

Each edit is `{"filename", "content", "location": {"row", "column"}, "end_location": {"row",
"column"}}`: rows and columns 1-based, columns in characters, the text from `location` up to (not
including) `end_location` replaced by `content`. `filename` is absolute. Standard library only.
"""

from __future__ import annotations

import bisect
import difflib
import os
from collections.abc import Iterable
from typing import Any

from .source import Edit, Source


def _position(starts: list[int], offset: int) -> dict[str, int]:
    row = bisect.bisect_right(starts, offset) - 1
    return {"row": row + 1, "column": offset - starts[row] + 1}


def _line_starts(text: str) -> list[int]:
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    if len(starts) > 1 and not text.endswith(("\n", "\r")):
        starts.pop()  # the last line has no line end: no row after it
    return starts


def to_json(src: Source, edit: Edit) -> dict[str, Any]:
    """An `Edit` (character offsets into `src`) in ruff's shape."""
    starts = _line_starts(src.text)
    return {
        "filename": os.path.abspath(edit.path),
        "content": edit.text,
        "location": _position(starts, edit.start),
        "end_location": _position(starts, edit.end),
    }


def between(path: str, before: str, after: str) -> list[dict[str, Any]]:
    """Edits that make `after` of `before` (whole lines replaced), in ruff's shape: edits made in
    rounds, each on the text the one before left, as one set on the file as it was."""
    old, new = before.splitlines(keepends=True), after.splitlines(keepends=True)
    starts = _line_starts(before) if old else [0]
    starts += [len(before)] * (len(old) + 1 - len(starts))
    src = Source(path, before)
    out = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag != "equal":
            out.append(to_json(src, Edit(path, starts[i1], starts[i2], "".join(new[j1:j2]))))
    return out


def offset(text: str, row: int, column: int) -> int:
    """The character offset of a 1-based (row, column) in `text` (ValueError when outside it)."""
    starts = _line_starts(text)
    if not 1 <= row <= len(starts) or column < 1:
        raise ValueError(f"row {row}, column {column} is outside the file")
    at = starts[row - 1] + column - 1
    if at > len(text):
        raise ValueError(f"row {row}, column {column} is outside the file")
    return at


def apply_json(text: str, edits: Iterable[dict[str, Any]]) -> str:
    """`text` with ruff-shaped edits made (all of one file; they must not overlap)."""
    spans = []
    for e in edits:
        start = offset(text, e["location"]["row"], e["location"]["column"])
        end = offset(text, e["end_location"]["row"], e["end_location"]["column"])
        spans.append((start, end, e["content"]))
    for start, end, content in sorted(spans, reverse=True):
        text = text[:start] + content + text[end:]
    return text


def by_file(edits: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for e in edits:
        out.setdefault(e["filename"], []).append(e)
    return out


def shown_path(path: str) -> str:
    """A path as the user names it: relative to the working directory when under it, else as given."""
    rel = os.path.relpath(path)
    return path if rel.startswith(os.pardir) else rel


def _before_after(path: str, edits: list[dict[str, Any]]) -> tuple[str, str] | None:
    """The file's text now and with the edits made; None when it cannot be read or they do not fit."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape", newline="") as fh:
            before = fh.read()
        return before, apply_json(before, edits)
    except (OSError, ValueError, KeyError):
        return None


def small_diff(edits: list[dict[str, Any]], context: int = 1) -> str:
    """The edits as a short unified diff of the user's lines (paths as the user named them, relative
    to the current directory when under it): what the console shows for a fix."""
    out: list[str] = []
    for path, mine in by_file(edits).items():
        texts = _before_after(path, mine)
        if texts is None:
            continue
        shown = shown_path(path)
        lines = difflib.unified_diff(
            texts[0].splitlines(keepends=True), texts[1].splitlines(keepends=True), shown, shown, n=context
        )
        out.extend(line if line.endswith("\n") else line + "\n" for line in lines)
    return "".join(out)


def effect(edits: list[dict[str, Any]]) -> tuple[tuple[str, str], ...]:
    """What the edits make of their files, (filename, patched text) each: two fixes whose edits
    differ in span but write the same text are the same fix. Empty when a file cannot be read."""
    out = []
    for path, mine in sorted(by_file(edits).items()):
        texts = _before_after(path, mine)
        if texts is None:
            return ()
        out.append((path, texts[1]))
    return tuple(out)


def place(edits: list[dict[str, Any]]) -> tuple[str | None, int | None]:
    """Where a fix's edits change the user's code: the file (relative to the working directory when
    under it) and row of its first edit that is not an added import."""
    main = [e for e in edits if not e["content"].lstrip().startswith(("import ", "from "))] or edits
    if not main:
        return None, None
    return shown_path(main[0]["filename"]), main[0]["location"]["row"]
