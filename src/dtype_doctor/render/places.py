"""Where a finding points in the user's files, for the formats that link to source (SARIF, GitHub):
the finding's own file:line first, then the origins of its operands (where a dtype was set)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

from ..report import Finding, Origin


@dataclass(frozen=True)
class Place:
    file: str  # as the report gives it
    line: int | None
    what: str  # what is there: "the failing op", "parameter 'w' in module 'fc'"


def _origins(origin: Origin | None) -> Iterator[Origin]:
    if origin is None:
        return
    yield origin
    for earlier in origin.chain:
        yield from _origins(earlier)


def places(finding: Finding) -> list[Place]:
    """The finding's places in source, its own first, each file:line once."""
    found: list[Place] = []
    loc = finding.location
    if loc is not None and loc.file:
        found.append(Place(loc.file, _line(loc.line), loc.describe() or finding.title))
    for operand in finding.operands:
        for origin in _origins(operand.origin):
            if origin.file:
                found.append(Place(origin.file, _line(origin.line), f"{operand.role}: {origin.describe()}"))
    once: dict[tuple[str, int | None], Place] = {}
    for place in found:
        once.setdefault((place.file, place.line), place)
    return list(once.values())


def _line(line: object) -> int | None:
    return line if isinstance(line, int) and not isinstance(line, bool) and line >= 1 else None


def relative(path: str, base: str | None = None) -> str | None:
    """`path` relative to `base` (default: the working folder) with `/` separators, or None when it
    lies outside it (or is no file path: `<stdin>`, `<string>`)."""
    if not path or path.startswith("<"):
        return None
    base = os.path.abspath(base or os.getcwd())
    full = os.path.abspath(path)
    try:
        rel = os.path.relpath(full, base)
    except ValueError:  # another drive
        return None
    if rel == os.pardir or rel.startswith(os.pardir + os.sep):
        return None
    return rel.replace(os.sep, "/")
