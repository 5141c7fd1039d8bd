"""The line experiment's search: which line of the user's, computed in float32 (float64 for a
program with no half line), cures the failing program.

The program is re-run in an isolated scratch copy (patching/verify.replay) with every user line that
computed in a low dtype (or under autocast) made wider (experiment/intervene.py), first leaving the
user's literal precision choices alone. If that cures it, the root is where the precision is lost,
tried alone: the first line that makes inf/NaN from finite values (a probe re-run, nothing changed),
else the first line of the shortest last part of the program that cures it; else the lines are
bisected in the order they first ran (module-wide casts last), the shortest first part that cures
ending at the root. Every re-run counts against the deadline. No torch import.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..editing.fix_edits import shown_path
from ..patching.verify import Command, Replay, replay

TRY_ENV = "DTYPE_DOCTOR_TRY"  # = intervene.ENV
RECORD = ".dtype-doctor-try.json"


@dataclass
class Outcome:
    """What the line experiment found: the root line (None: not found), the re-runs it made."""

    runs: int = 0
    root: dict[str, Any] | None = None  # the record entry of the root line, its key made the original path
    prefix: list[dict[str, Any]] = field(default_factory=list)  # the lines that cure together, root last
    alone: bool = False  # the root line's edit alone cures (else only with the lines before it)
    why: str = ""  # why no root was found
    candidates: int = 0
    skipped: list[str] = field(default_factory=list)  # re-run keys of roots whose edit did not cure
    low: list[dict[str, Any]] = field(default_factory=list)  # every low-precision line's record entry
    keep: bool = True  # the pass that cured kept the user's own precision choices
    nonfinite: str = ""  # the line that, left as it is, makes inf/NaN from finite operands (the root's first)
    nonfinite_module: str = ""  # the module that line's first inf/NaN was made in
    # the lines the probe saw make inf/NaN, the first first
    probed: list[dict[str, Any]] = field(default_factory=list)
    # the root was tried alone: the first line that made inf/NaN, or the latest cure
    tried_alone: bool = False
    wide: bool = False  # no line computed in float16/bfloat16: float32 lines were tried in float64
    raised: str = ""  # the family code of the dtype error the program died of ("": none was seen)

    @property
    def up(self) -> str:
        """The dtype the experiment computed its lines in."""
        return "float64" if self.wide else "float32"


def _collect(scratch: str) -> list[dict[str, Any]]:
    try:
        with open(os.path.join(scratch, RECORD), encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return []
    return [e for e in data if isinstance(e, dict) and isinstance(e.get("key"), str)]


def _cured(seen: Replay) -> bool:
    return seen.code == 0 and not seen.stopped and seen.errors == 0


def _runner(
    out: Outcome, command: Command, anchor: str, deadline: float, timeout: float
) -> Callable[..., Replay]:
    """One re-run of the program with `$DTYPE_DOCTOR_TRY` set for `lines`, counted in `out`."""

    def run(lines: Any, keep: bool, skip: list[str] | None = None, probe: bool = False) -> Replay:
        out.runs += 1
        record = RECORD if lines == "*" or probe else None
        spec = json.dumps(
            {"lines": lines, "keep": keep, "record": record, "skip": skip, "probe": probe, "wide": out.wide}
        )
        left = max(10.0, min(timeout, deadline - time.monotonic()))
        return replay({}, command, anchor, timeout=left, extra_env={TRY_ENV: spec}, collect=_collect)

    return run


def search(command: Command, anchor: str, deadline: float, timeout: float) -> Outcome:
    """Find the user line whose float32 computation cures the failing program (see the module doc)."""
    out = Outcome()
    run = _runner(out, command, anchor, deadline, timeout)
    # first with the user's own precision choices kept (their literal casts, the library modules
    # their lines call): a cure there is a line that computes in a precision it inherited
    out.keep = True
    first = run("*", out.keep)
    if not (first.collected and _cured(first)):
        out.keep = False
        first = run("*", out.keep)
    if not first.collected:  # no half line at all: a float32 program whose precision fails it?
        out.wide, out.keep = True, True
        first = run("*", out.keep)
    entries = first.collected or []
    out.candidates, out.low = len(entries), entries
    if not entries:
        out.why = "no line of yours computed in float16/bfloat16 (nor in float32, tried in float64)"
        return out
    if not _cured(first):
        out.why = (
            f"computing every one of your {len(entries)} low-precision lines in {out.up} does not cure it"
        )
        return out
    as_is = _probe(out, run, anchor)
    if not (_nonfinite_first(out, run) or _latest_cure(out, as_is, run, anchor, deadline)):
        _bisect(out, entries, run, anchor, deadline)
    return out


def _probe(out: Outcome, run: Callable[..., Replay], anchor: str) -> list[dict[str, Any]]:
    """The program left as it is, recording every low-precision line in the order they first ran
    (returned) and which make inf/NaN from finite operands (`out.probed`, the first first)."""
    as_is = run([], out.keep, probe=True).collected or []
    made = sorted((e for e in as_is if e.get("nonfinite")), key=lambda e: e.get("nonfinite_order", 0))
    out.probed = [_users(e, anchor) for e in made]
    return as_is


def _nonfinite_first(out: Outcome, run: Callable[..., Replay]) -> bool:
    """The first line that made inf/NaN from finite operands (the symptom's own op), tried alone
    before any bisection: a float32 line upstream would cure it too, by widening far more. It is
    recorded in the program as it is (a line low there may not be once everything is float32).
    True when it cures: the root."""
    first = out.probed[0] if out.probed else None
    return first is not None and _root_alone(out, first, run)


def _latest_cure(
    out: Outcome, as_is: list[dict[str, Any]], run: Callable[..., Replay], anchor: str, deadline: float
) -> bool:
    """The shortest last part of the program's low-precision lines (as it runs, module-wide casts
    aside) that cures it: its first line is where the precision is lost, since a line can only cure
    from there what it computes itself (the values it is given stay rounded). Tried alone; True when
    it cures: the root, which widens the least of the program's precision."""
    latest = [e for e in as_is if not e.get("module_cast")][::-1]
    if not latest or not _cured(run([e["key"] for e in latest], out.keep)):
        return False
    n = _shortest_cure(out, latest, run, deadline)
    return n is not None and _root_alone(out, _users(latest[n - 1], anchor), run)


def _root_alone(out: Outcome, entry: dict[str, Any], run: Callable[..., Replay]) -> bool:
    """`entry` (its key the user's path, "raw" the re-run's) computed in float32 alone: when that
    cures, it is the root (True)."""
    if not _cured(run([entry["raw"]], out.keep)):
        return False
    out.prefix, out.root, out.tried_alone = [entry], entry, True
    return True


def _shortest_cure(
    out: Outcome, entries: list[dict[str, Any]], run: Callable[..., Replay], deadline: float
) -> int | None:
    """The least n for which the lines of entries[:n] in float32 cure the program (all of them do),
    by bisection; None (`out.why` says so) when the deadline passes first."""
    keys = [e["key"] for e in entries]
    lo, hi = 1, len(keys)
    while lo < hi:
        if time.monotonic() > deadline:
            out.why = f"the budget ran out bisecting {len(keys)} lines"
            return None
        mid = (lo + hi) // 2
        if _cured(run(keys[:mid], out.keep)):
            hi = mid
        else:
            lo = mid + 1
    return hi


def search_without(outcome: Outcome, command: Command, anchor: str, deadline: float, timeout: float) -> bool:
    """The root line's own edit did not cure: the lines other than the roots found so far, if they
    cure together, bisected again (another line that cures is a root whose edit may work)."""
    assert outcome.root is not None
    outcome.skipped.append(outcome.root["raw"])
    outcome.root, outcome.prefix = None, []
    run = _runner(outcome, command, anchor, deadline, timeout)
    if time.monotonic() > deadline:
        return False
    again = run("*", outcome.keep, outcome.skipped)  # recorded anew: lines low only once the root is not
    rest = [e for e in again.collected or [] if e["key"] not in outcome.skipped]
    if not rest or not _cured(again):
        return False
    _bisect(outcome, rest, run, anchor, deadline)
    return outcome.root is not None


def _bisect(
    out: Outcome, entries: list[dict[str, Any]], run: Callable[..., Replay], anchor: str, deadline: float
) -> None:
    """The shortest first part of `entries` (all of which cure together) that cures: its last line
    is the root (`out.root`, `out.prefix`). A module-wide cast is the user's own choice of the
    parameters' dtype: its buffers are tried after every line that computed in a dtype it inherited."""
    entries = sorted(entries, key=lambda e: bool(e.get("module_cast")))
    n = _shortest_cure(out, entries, run, deadline)
    if n is None:
        return
    out.prefix = [_users(e, anchor) for e in entries[:n]]
    out.root = out.prefix[-1]


def _users(entry: dict[str, Any], anchor: str) -> dict[str, Any]:
    """A record entry with its key the user's `path:line` (`original`), the re-run's kept as "raw"."""
    return {**entry, "key": original(entry["key"], anchor), "raw": entry["key"]}


def original(key: str, anchor: str) -> str:
    """A re-run's `path:line` (relative to its scratch copy, else absolute) as the user's file."""
    path, _, line = key.rpartition(":")
    if not os.path.isabs(path):
        path = os.path.join(os.path.abspath(anchor), path)
    return f"{shown_path(path)}:{line}"
