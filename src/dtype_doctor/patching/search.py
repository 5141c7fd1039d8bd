"""Which edits to try: each root cause's candidates combined, re-run one set after another through
the verifier's re-run back-end (verifying/backends/patched.py) until one passes. No torch import."""

from __future__ import annotations

import time
from collections.abc import Callable

from ..editing.source import Edit, apply
from .plan import Candidate, Cause
from .verify import Patched, Replay, attempt

MAX_REPLAYS = 8
SKIP = -1  # a choice that leaves its cause unedited (the others may be what fixes the program)


def combine(causes: list[Cause], choice: list[int]) -> tuple[list[Candidate], list[Edit]]:
    """The chosen candidate of each cause (none for SKIP); one that overlaps an earlier cause's edits
    is left out."""
    chosen: list[Candidate] = []
    edits: list[Edit] = []
    for cause, index in zip(causes, choice, strict=True):
        if index == SKIP:
            continue
        cand = cause.candidates[index]
        fresh = [e for e in cand.edits if e not in edits]
        if any(_overlap(e, d) for e in fresh for d in edits):
            continue
        chosen.append(cand)
        edits.extend(fresh)
    return chosen, edits


def _overlap(a: Edit, b: Edit) -> bool:
    """Two edits touch the same text (an insertion conflicts only with a span it falls inside)."""
    if a.path != b.path or (a.start == a.end and b.start == b.end):
        return False
    if a.start == a.end:
        return b.start < a.start < b.end
    if b.start == b.end:
        return a.start < b.start < a.end
    return a.start < b.end and b.start < a.end


def patched(originals: dict[str, str], edits: list[Edit]) -> dict[str, str]:
    """path -> patched text, for the files the edits touch."""
    out: dict[str, str] = {}
    for path in dict.fromkeys(e.path for e in edits):
        out[path] = apply(originals[path], [e for e in edits if e.path == path])
    return out


def search(
    causes: list[Cause],
    originals: dict[str, str],
    run: Callable[[dict[str, str]], Replay],
    budget: int = MAX_REPLAYS,
    on_progress: Callable[[int, int], None] | None = None,
    log: list[tuple[list[Candidate], Replay]] | None = None,
    deadline: float | None = None,
) -> tuple[list[Candidate], dict[str, str], Replay | None]:
    """Try each cause's candidates in order (first of each together, then one cause at a time; with
    several causes, last each cause left unedited) through the verifier's re-run back-end (`run`: one
    re-run of the patched files), keep the first set that passes, else the best seen. Returns
    (chosen, files, replay). `on_progress(done, total)` hears of each candidate set before its
    re-run; `log` gets each set tried with what its re-run saw. `deadline` (time.monotonic()): no
    set is started after it."""
    if not causes:
        return [], {}, None
    backend = Patched(originals, run)
    skips = len(causes) if len(causes) > 1 else 0
    total = min(budget, 1 + sum(len(c.candidates) - 1 for c in causes) + skips)

    def tried(files: dict[str, str], done: int, chosen: list[Candidate]) -> Replay:
        if on_progress is not None:
            on_progress(done, total)
        seen = attempt(files, backend)
        if log is not None:
            log.append((chosen, seen))
        return seen

    choice = [0] * len(causes)
    chosen, edits = combine(causes, choice)
    best_files = patched(originals, edits)
    best = tried(best_files, 0, chosen)
    best_chosen, used = chosen, 1
    for i, cause in enumerate(causes):
        for j in [*range(1, len(cause.candidates)), *([SKIP] if skips else [])]:
            if best.passed or used >= budget or (deadline is not None and time.monotonic() > deadline):
                return best_chosen, best_files, best
            trial = [*choice[:i], j, *choice[i + 1 :]]
            chosen, edits = combine(causes, trial)
            if not edits:
                continue
            files = patched(originals, edits)
            result, used = tried(files, used, chosen), used + 1
            if result.score() > best.score():
                choice, best, best_chosen, best_files = trial, result, chosen, files
    return best_chosen, best_files, best
