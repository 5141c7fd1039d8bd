"""Test helpers for asserting on origins: the caller's line, and every file:line an origin names."""

from __future__ import annotations

import inspect


def here() -> int:
    """The line number of the caller's statement."""
    return inspect.currentframe().f_back.f_lineno  # type: ignore[union-attr]


def origin_lines(origin) -> set[tuple[str | None, int | None]]:
    """Every file:line an origin and its chain name."""
    out = {(origin.file, origin.line)}
    for c in origin.chain:
        out |= origin_lines(c)
    return out
