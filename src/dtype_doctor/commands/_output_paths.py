"""Where a command's outputs go, fixed before any user code runs, and the user's source files they
must never replace (issue 42 H2/H3).

A program that runs under `run` (or a factory under `check`) may `os.chdir`: a relative output
PATH is resolved against the folder the command started in, once, before that; and a report is
never written over a source file that the report's own fixes edit (what `--write` patches).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from ..render.outputs import Output


def start_dir() -> str | None:
    """The working folder now (None when it was removed: the paths stay as given)."""
    try:
        return os.getcwd()
    except OSError:
        return None


def fixed_at_start(given: list[tuple[str, Output]], start: str | None) -> list[tuple[str, Output]]:
    """Every output that goes to a file, its PATH made absolute against `start` (an absolute PATH,
    `/dev/fd/N` or `/dev/stdout`, stays as it is; stdout and the console stay where they go)."""
    if start is None:
        return list(given)
    return [
        (label, Output(o.format, os.path.join(start, str(o.path))) if o.to_file else o) for label, o in given
    ]


def source_files(report: Any) -> list[str]:
    """The files the report's fixes edit or paste into, and those `--write` patched: the user's
    source, which no output may replace."""
    return sorted({p for p in _named_files(report) if isinstance(p, str) and p})


def _named_files(report: Any) -> Iterator[Any]:
    for finding in getattr(report, "findings", ()):
        for fix in getattr(finding, "fixes", ()):
            yield fix.file
            yield from (edit.get("filename") for edit in fix.edits if isinstance(edit, dict))
    for section in getattr(report, "sections", ()):
        yield from getattr(section, "files", ())
        yield from getattr(section, "written", ())
