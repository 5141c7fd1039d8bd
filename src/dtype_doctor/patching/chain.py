"""Edits in rounds: a program that fails twice over is fixed one failure at a time.

When the best edit set of a round cures the run's dtype error but the re-run dies of another one
further on (the first mismatch hid the second), the re-run's own report is planned again, on the
files as the round's edits left them, and the next round's edits are searched on top. A round is
kept only when its re-run gets further: it passes, or it fails somewhere the round before did not.
No torch import.
"""

from __future__ import annotations

import difflib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..editing.source import Edit, Source
from ..report import Report, Severity
from .candidates import Cause, only
from .plan import Candidate, Planner
from .search import search
from .shown import edit_line
from .verify import Replay

MAX_ROUNDS = 3


@dataclass
class Round:
    """One round's outcome: the candidates it chose, the files as they stand after it (path -> text:
    every file any round touched) and its best re-run."""

    chosen: list[Candidate]
    files: dict[str, str]
    result: Replay | None
    causes: list[str] = field(default_factory=list)  # each chosen candidate's cause label


def failures(report: Report, text_of: Callable[[str], str | None]) -> set[tuple]:
    """What tells one dtype error from another across rounds: its code, module, op and the text of
    its line (line numbers move when a round inserts lines)."""
    out = set()
    for f in report.findings:
        if f.severity != Severity.ERROR:
            continue
        loc = f.location
        line = None
        if loc is not None and loc.file and loc.line:
            text = text_of(loc.file)
            rows = text.splitlines() if text is not None else []
            line = rows[loc.line - 1].strip() if 0 < loc.line <= len(rows) else None
        out.add((f.code, loc.module if loc else None, loc.op if loc else None, line))
    return out


def further(
    planner: Planner,
    before: Report,
    before_files: dict[str, str],
    after: Replay,
    after_files: dict[str, str],
) -> bool:
    """The re-run (`after`, of `after_files`) died of a dtype error the run before (`before`, of
    `before_files`) did not: the edits cured what they were for, and something further on fails."""
    if after.passed or after.report is None:
        return False

    def text_in(files: dict[str, str]) -> Callable[[str], str | None]:
        def text(path: str) -> str | None:
            if path in files:
                return files[path]
            src = planner.source(path)
            return src.text if src is not None else None

        return text

    new = failures(after.report, text_in(after_files))
    return bool(new - failures(before, text_in(before_files)))


def _coherent(causes: list[Cause], rounds: list[Round], planner: Planner, nxt: Planner) -> list[Cause]:
    """A later round goes on in the direction the earlier ones took: candidates toward a dtype they
    chose first, and none that edits a line an earlier round wrote (it would undo it)."""
    kept = {c.dtype for r in rounds for c in r.chosen if c.dtype}
    written: dict[str, set[int]] = {}
    for path, text in rounds[-1].files.items():
        before = planner.sources.get(path)
        if before is not None:
            written[path] = _rows_written(before.text, text)
    out = []
    for cause in causes:
        fresh = [
            k for k in cause.candidates if not any(_row(nxt, e) in written.get(e.path, ()) for e in k.edits)
        ]
        fresh.sort(key=lambda k: k.dtype not in kept)
        if fresh:
            out.append(Cause(cause.label, fresh))
    return out


def _rows_written(before: str, after: str) -> set[int]:
    """The 1-based rows of `after` that are not `before`'s."""
    old, new = before.splitlines(), after.splitlines()
    rows: set[int] = set()
    for tag, _, _, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag != "equal":
            rows.update(range(j1 + 1, j2 + 1))
    return rows


def _row(planner: Planner, edit: Edit) -> int | None:
    src = planner.sources.get(edit.path)
    return edit_line(src, edit) if src is not None else None


def one_round(
    causes: list[Cause],
    originals: dict[str, str],
    run: Callable[[dict[str, str]], Replay],
    log: list[tuple[list[Candidate], Replay]],
    on_progress: Callable[[int, int], None] | None = None,
    deadline: float | None = None,
) -> Round:
    """One search (search.py) over `causes`' candidates on `originals`: its files are those it touched."""
    chosen, files, result = search(
        causes, originals, run, on_progress=on_progress, log=log, deadline=deadline
    )
    labels = [next(c.label for c in causes if cand in c.candidates) for cand in chosen]
    return Round(chosen, files, result, labels)


def next_rounds(
    planner: Planner,
    report: Report,
    first: Round,
    run: Callable[[dict[str, str]], Replay],
    log: list[tuple[list[Candidate], Replay]],
    on_progress: Callable[[int, int], None] | None = None,
    deadline: float | None = None,
) -> list[Round]:
    """The rounds after `first` (none when it passed, or its re-run got no further than the run):
    each plans the previous re-run's report on the files that round left and searches its edits
    with every earlier round's kept."""
    rounds = [first]
    before, before_files = report, {}
    while len(rounds) < MAX_ROUNDS and (deadline is None or time.monotonic() < deadline):
        last = rounds[-1]
        if last.result is None or not further(planner, before, before_files, last.result, last.files):
            break
        assert last.result.report is not None
        overlay = {}
        for path, text in last.files.items():
            src = planner.sources.get(path)
            overlay[path] = Source(path, text, src.encoding if src is not None else "utf-8")
        nxt = Planner(planner.user_file, planner.home, planner.since_ns, overlay)
        causes = _coherent(only(nxt.plan(last.result.report), broad=False), rounds, planner, nxt)
        if not causes:
            break
        base = {path: src.text for path, src in nxt.sources.items() if src is not None}
        nxt_round = one_round(
            causes,
            base,
            lambda patched, kept=last.files: run({**kept, **patched}),
            log,
            on_progress,
            deadline,
        )
        chosen, files, result = nxt_round.chosen, nxt_round.files, nxt_round.result
        now = {**last.files, **files}
        if result is None or not chosen:
            break
        if not result.passed and not further(planner, last.result.report, last.files, result, now):
            break
        for path, src in nxt.sources.items():  # read first in this round: as they are on disk
            planner.sources.setdefault(path, src)
        rounds.append(Round(chosen, now, result, nxt_round.causes))
        before, before_files = last.result.report, last.files
    return rounds[1:]
