"""The verified fix as a patch to the user's own files (`run --diff`, `--write`, `check --diff`).

`plan.py` turns each root cause of a report into candidate edits (best first), `search.py` has the
verifier's re-run back-end (verifying/backends/patched.py) re-run the patched program in a scratch
copy and keeps the first candidates that pass, `write.py` applies the verified diff. `propose` ties them together and returns a `sections.SourcePatch`. No torch import.
"""

from __future__ import annotations

import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..editing.fix_edits import between, shown_path, to_json
from ..editing.source import diff_bytes, unified_diff
from ..report import Report, Severity
from ..sections import SourcePatch
from .candidates import only
from .chain import Round, next_rounds, one_round
from .plan import Candidate, Cause, Planner, is_user_file, plan
from .search import search
from .shown import finding_files
from .verify import Command, Replay, check_command, replay, run_command

__all__ = [
    "Candidate",
    "Cause",
    "Planner",
    "Proposal",
    "SourcePatch",
    "check_command",
    "is_user_file",
    "plan",
    "propose",
    "run_command",
    "search",
]


ROUNDS_TIME_FACTOR = 2.0


@dataclass
class Proposal:
    """The patch section and what `--write` needs: each file's text at the run and patched."""

    section: SourcePatch
    tried: int = 0  # edit sets re-run
    edits: list[dict] = field(default_factory=list)  # the chosen edits, in ruff's shape (editing/fix_edits)
    originals: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    encodings: dict[str, str] = field(default_factory=dict)  # path -> the encoding Python reads it in

    def diff_bytes(self) -> bytes:
        """The diff in each file's own bytes (a latin-1 file's lines in latin-1): what `patch` applies."""
        return b"".join(
            diff_bytes(p, self.originals[p], text, self.encodings.get(p, "utf-8"))
            for p, text in self.files.items()
        )


def propose(
    report: Report,
    command: Command,
    anchor: str,
    user_file: Callable[[str | None], bool] = is_user_file,
    timeout: float | None = 600,
    home: str | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    deadline: float | None = None,
    since_ns: int | None = None,
) -> Proposal:
    """Plan edits for `report`'s root causes, replay them with `command` (see verifying/backends/
    patched.replay) and return the patch of the first candidates that pass (else the best tried),
    with the replay's outcome. `on_progress(done, total)`: before each re-run. `since_ns`: when the
    program started; a file written since is not edited (Planner)."""
    planner = Planner(user_file, home, since_ns)
    causes = planner.plan(report)
    if not causes:
        what = _why_none(report, planner) if report.findings else "nothing to fix"
        return Proposal(SourcePatch(verified=None if report.findings else True, outcome=what))
    originals = {path: src.text for path, src in planner.sources.items() if src is not None}
    encodings = {path: src.encoding for path, src in planner.sources.items() if src is not None}

    errors = sum(1 for f in report.findings if f.severity == Severity.ERROR)
    warnings = sum(1 for f in report.findings if f.severity == Severity.WARNING)
    codes = frozenset(f.code for f in report.findings if f.severity in (Severity.ERROR, Severity.WARNING))

    def run(files: dict[str, str]) -> Replay:
        result = replay(files, command, anchor, timeout=timeout, encodings=encodings)
        result.warnings_before = 0 if errors else warnings
        result.causes = codes
        return result

    log: list[tuple[list[Candidate], Replay]] = []
    rounds = _search_in_rounds(planner, report, causes, originals, run, log, on_progress, deadline)
    chosen = [c for r in rounds for c in r.chosen]
    files, result, later = rounds[-1].files, rounds[-1].result, len(rounds) - 1
    changes = [
        {"cause": label, "change": c.title}
        for r in rounds
        for label, c in zip(r.causes, r.chosen, strict=True)
    ]
    for path, src in planner.sources.items():  # files a later round read first
        if src is not None and path not in originals:
            originals[path], encodings[path] = src.text, src.encoding
    diff = "".join(unified_diff(p, originals[p], text, encodings[p]) for p, text in files.items())
    outcome = result.describe() if result is not None else ""
    if result is not None:
        outcome += "\n" + _why_chosen(chosen, result, log, later)
    if result is not None and not result.passed and result.tail:
        outcome += "\nthe patched copy's output ended with:\n" + textwrap.indent(result.tail, "  ")
    section = SourcePatch(
        diff=diff,
        files=list(files),
        changes=changes,
        verified=result.passed if result is not None else None,
        outcome=outcome,
    )
    if later:  # edits made on the text an earlier round left: as one set on the files as they were
        edits = [e for p, text in files.items() for e in between(p, originals[p], text)]
    else:
        made = dict.fromkeys(e for cand in chosen for e in cand.edits)  # as search.combine applied them
        edits = [to_json(src, e) for e in made if (src := planner.sources.get(e.path)) is not None]
    return Proposal(
        section,
        len(log),
        edits,
        {p: originals[p] for p in files},
        files,
        {p: encodings[p] for p in files},
    )


def _search_in_rounds(
    planner: Planner,
    report: Report,
    causes: list[Cause],
    originals: dict[str, str],
    run: Callable[[dict[str, str]], Replay],
    log: list[tuple[list[Candidate], Replay]],
    on_progress: Callable[[int, int], None] | None,
    deadline: float | None,
) -> list[Round]:
    """The narrow candidates first, in rounds while each re-run gets further (chain.py); when none
    of that passes, the broad ones (the whole model in float32): the rounds of what is chosen."""
    narrow, broad = only(causes, broad=False), only(causes, broad=True)
    rounds: list[Round] = []
    if narrow:
        began = time.monotonic()
        first = one_round(narrow, originals, run, log, on_progress, deadline)
        # later rounds take at most twice the first one's time (--diff/--write set no deadline)
        until = time.monotonic() + ROUNDS_TIME_FACTOR * (time.monotonic() - began)
        until = min(until, deadline) if deadline is not None else until
        rounds = [first, *next_rounds(planner, report, first, run, log, on_progress, until)]
        if rounds[-1].result is not None and rounds[-1].result.passed:
            return rounds
    if broad:
        wide = one_round(broad, originals, run, log, on_progress, deadline)
        best = rounds[-1].result if rounds else None
        if not rounds or (wide.result is not None and (best is None or wide.result.score() > best.score())):
            return [wide]
    return rounds


def _why_none(report: Report, planner: Planner) -> str:
    """Why no edit is proposed: the findings touch no file of the user's, or none gave an edit there."""
    if planner.changed:
        return (
            f"{', '.join(dict.fromkeys(map(shown_path, planner.changed)))} changed while the program ran: its lines are not the ones"
            " that ran, so no edit is made there (run again)"
        )
    mine = [
        path
        for f in report.findings
        for path in finding_files(f)
        if f.severity in (Severity.ERROR, Severity.WARNING) and planner.source(path) is not None
    ]
    if not mine:
        return "no root cause lies in (or is called from) a file of yours"
    names = ", ".join(dict.fromkeys(mine))
    return f"no edit of {names} could be derived from the findings: no shown fix with code could be pasted there, and no cast applies"


def _why_chosen(
    chosen: list[Candidate], result: Replay, log: list[tuple[list[Candidate], Replay]], later: int = 0
) -> str:
    """Which edit set the patch is, and why: the first of those tried, in lineage order (each cause's
    candidates at its earliest birth first), whose re-run passed; else the one that came closest.
    `later`: rounds after the first (chain.py), each planned from the re-run before it."""
    n = len(log)
    sets = f"{n} edit set{'s' if n != 1 else ''} tried"
    if later:
        sets += (
            f" in {later + 1} rounds (each re-run died of a dtype error further on: the next round was"
            " planned from its report, on the files as the round before left them)"
        )
    at = next((i for i, (cands, seen) in enumerate(log) if seen is result), None)
    what = "; ".join(c.title for c in chosen) or "no edit"
    if result.passed:
        return (
            f"chosen: {what}: the first of {sets} (earliest birth of the odd dtype first) whose re-run "
            f"passed{f' (set {at + 1})' if at is not None and n > 1 else ''}"
        )
    return f"none of the {sets} passed its re-run; shown: the one that came closest ({what})"
