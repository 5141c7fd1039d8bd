"""Lines folded to a width, so that no output is wider than the terminal (issue 32): code cut with
a continuation mark (pasted, a marked piece is visibly part of the line above), prose at spaces."""

from __future__ import annotations

import shutil
import textwrap

CONTINUED = "↪ "  # marks the rest of a code line too wide for its place


def terminal_width(fallback: int = 80) -> int:
    """`COLUMNS`, else the terminal's width, else `fallback` (a file or a pipe)."""
    return shutil.get_terminal_size((fallback, 24)).columns


def fold_code_line(line: str, width: int) -> list[str]:
    """A code line cut into pieces of at most `width` columns, before a space where one is near; each
    piece after the first is indented like the line and marked as its continuation (the line is the
    pieces joined, each mark and the indent before it dropped)."""
    if len(line) <= width:
        return [line]
    lead = " " * (len(line) - len(line.lstrip())) + CONTINUED
    room = max(width - len(lead), 8)
    pieces, rest, room_here = [], line, width
    while len(rest) > room_here:
        cut = rest.rfind(" ", room_here // 2, room_here)  # the space starts the next piece: lossless
        cut = cut if cut > 0 else room_here
        pieces.append(rest[:cut])
        rest, room_here = rest[cut:], room
    pieces.append(rest)
    return [pieces[0], *(lead + piece for piece in pieces[1:])]


def fold_prose_line(line: str, width: int, hang: int = 2) -> list[str]:
    """A line of prose wrapped at spaces to `width`, the lines after the first indented `hang` more
    than it; a word longer than the width (a path, a URL) is kept whole: cut, it could not be copied."""
    if len(line) <= width:
        return [line]
    indent = " " * (len(line) - len(line.lstrip()))
    return textwrap.wrap(
        line.strip(),
        width=width,
        initial_indent=indent,
        subsequent_indent=indent + " " * hang,
        break_on_hyphens=False,
        break_long_words=False,
    ) or [line]
