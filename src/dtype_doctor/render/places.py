"""Where a finding points in the user's files, for the formats that link to source (SARIF, GitHub):
the finding's own file:line first, then the origins of its operands (where a dtype was set); in the
repository (`in_repository`): paths relative to its top level, never a file of an installed library."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass

from ..report import Finding, Origin, Report
from ..tracing.files import library_file


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


def your_code(finding: Finding) -> Place | None:
    """The user's frame that called into the code where the finding happened (`your_code`,
    `FILE:LINE`, which a live run records when that code is not the user's own)."""
    your = finding.data.get("your_code")
    if not isinstance(your, str) or ":" not in your:
        return None
    file, _, line = your.rpartition(":")
    return Place(file, int(line), "your code that reached it") if file and line.isdigit() else None


def in_repository(finding: Finding, root: str, entry: Place | None = None) -> list[Place]:
    """The finding's places in the repository at `root`, each file as a path relative to it: its own
    file:line, or where that is an installed library's (or outside the root) the user's frame that
    reached it, then its operands' origins; `entry` (the factory or script the command started from,
    `entry_point`) where none of them is the user's. A library's file is never one of them."""
    found = places(finding)
    own = finding.location is not None and bool(finding.location.file)
    if own and repository_path(found[0].file, root) is None and (mine := your_code(finding)) is not None:
        found.insert(1, Place(mine.file, mine.line, f"your call that reached {found[0].what}"))
    shown: dict[tuple[str, int | None], Place] = {}
    for place in found:
        rel = repository_path(place.file, root)
        if rel is not None:
            shown.setdefault((rel, place.line), Place(rel, place.line, place.what))
    if not shown and entry is not None and (rel := repository_path(entry.file, root)) is not None:
        what = entry.what + (f"; it reached {found[0].what}" if own else "")
        return [Place(rel, entry.line, what)]
    if not shown and (read := log_line(finding)) is not None and (rel := repository_path(read.file, root)):
        return [Place(rel, read.line, read.what)]
    return list(shown.values())


def log_line(finding: Finding) -> Place | None:
    """The line of a file `explain` read (a log in the repository) that the finding rests on: its
    first evidence read from a file, at that file's line."""
    read = next((e for e in finding.evidence if e.source and e.line and not e.source.startswith("<")), None)
    return Place(read.source, read.line, "the line of the log this finding rests on") if read else None


def entry_point(report: Report) -> Place | None:
    """The user's code the command started from, for a finding that has no line of the user's: the
    factory a check, audit or numerics built the model with (its target, `model.py:build`, at the
    line that defines it), or the script `run` ran (line 1). None for a module target (`-m pkg`,
    `pkg.models:build`) or another command."""
    if report.tool == "run":
        words = str(report.meta.get("program") or "").split(" ")
        script = next((p for i in range(len(words), 0, -1) if os.path.isfile(p := " ".join(words[:i]))), None)
        ran = f"the program dtype-doctor run ran ({script})"
        return Place(script, 1, ran) if script is not None and script.endswith(".py") else None
    target = report.meta.get("target") if report.tool in ("check", "audit", "numerics") else None
    if not isinstance(target, str) or ":" not in target:
        return None
    path, _, name = target.rpartition(":")
    if not path.endswith(".py") or not os.path.isfile(path):
        return None
    line = 1
    try:
        with open(path, encoding="utf-8") as source:
            defines = re.compile(rf"(?:async\s+def|def|class)\s+{re.escape(name)}\b|{re.escape(name)}\s*[:=]")
            line = next((n for n, text in enumerate(source, 1) if defines.match(text)), 1)
    except (OSError, UnicodeDecodeError):
        pass
    return Place(path, line, f"the factory dtype-doctor {report.tool} built the model with ({target})")


def repository_path(path: str | None, root: str) -> str | None:
    """`path` (absolute, or relative to the working folder as reports write it) relative to the
    repository `root`, or None: outside it, an installed library's file, no file here (`<stdin>`,
    the `--input 2x8` a check names as an input's origin, a path of another machine's report)."""
    if not path or path.startswith("<") or not os.path.isfile(path) or library_file(path):
        return None
    return relative(path, root)


def source_root(report: Report | None = None, base: str | None = None) -> str:
    """The folder SARIF and GitHub paths are relative to: the top level of the git work tree that
    holds the report's first file of the user's (else the one holding `base`, default the working
    folder), else `base` itself. Run from `repo/src`, paths still start at `repo`."""
    start = os.path.abspath(base or os.getcwd())
    entry = entry_point(report) if report is not None else None
    for finding in report.findings if report is not None else ():
        for place in [*places(finding), *filter(None, [your_code(finding), entry])]:
            full = os.path.abspath(place.file)
            if not place.file.startswith("<") and not library_file(place.file) and os.path.isfile(full):
                return git_top(os.path.dirname(full)) or git_top(start) or start
    return git_top(start) or start


def git_top(folder: str) -> str | None:
    """The top level of the git work tree holding `folder` (the nearest folder with a `.git`: a
    directory, or a file in a worktree or submodule), or None outside one."""
    here = os.path.abspath(folder)
    while True:
        if os.path.exists(os.path.join(here, ".git")):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent
