"""The one verifier: `verify(candidate, backend) -> Verdict`.

A back-end (backends/live.py: the user's outermost model call replayed; backends/dry_run.py:
check's dry run on meta; backends/patched.py: the patched program re-run) only runs a candidate and
says what it saw, as an `Outcome` (plain data: it crosses the pipe from a forked child). The
contract is applied here, once, for all three (contract.py):

- a candidate that changes no code (a comment, `pass`, an empty edit, the same syntax tree) is never
  run and never verified;
- a candidate the back-end cannot run is "not verified (why)", and so is one the guard stopped;
- it is `verified` only when the original failing program point passes, the rest of the program
  runs, and the output's error against float32 on the same inputs is within THRESHOLD; over it, it
  runs but is never said to pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from .contract import NO_CODE, Verdict, fails, has_code, not_verified, on_error, same_code, verified


@dataclass
class Outcome:
    """What a back-end saw when it ran a candidate. At most one of `stopped`, `raised`, `failed` is
    set; when none is, the candidate ran to the end and `error` (or `unmeasured`) says how close to
    float32 its output is."""

    stopped: str = ""  # not run to the end, not the candidate's fault (the guard, a timeout): why
    raised: str = ""  # the candidate itself raised while applied: "TypeError: ..."
    failed: str = ""  # the failing point, or the rest of the program, still fails: what happened
    error: float | None = None  # max rel. error vs fp32 on the same inputs; None: no non-zero output
    unmeasured: str = ""  # why the error vs fp32 cannot be measured (meta, new weights): what passed


class Backend(Protocol):
    """How one back-end runs a candidate (a Fix for live and dry run, a set of patched files for
    the re-run)."""

    def edits(self, candidate: Any) -> list[tuple[str, str]]:
        """(before, after) code of each change the candidate makes ("" before: a snippet added)."""
        ...

    def refuse(self, candidate: Any) -> str | None:
        """Why the candidate cannot be run here, known before anything runs; None when it can."""
        ...

    def run(self, candidate: Any) -> Outcome:
        """Run the program with the candidate applied, apart from the user's process."""
        ...


def changes_code(before: str, after: str) -> bool:
    """`after` does something `before` did not: a snippet with code, or a file whose syntax tree changed."""
    return has_code(after) if not before else not same_code(before, after)


def judge(outcome: Outcome) -> Verdict:
    """The contract: what an outcome is labelled."""
    if outcome.stopped:
        return not_verified(outcome.stopped)
    if outcome.raised:
        return fails(f"the fix itself raised {outcome.raised}")
    if outcome.failed:
        return fails(outcome.failed)
    if outcome.unmeasured:
        return verified(outcome.unmeasured)
    return on_error(outcome.error)


def verify(candidate: Any, backend: Backend) -> Verdict:
    """The candidate's label: never run when it changes no code, else run by `backend` and judged."""
    if not any(changes_code(before, after) for before, after in backend.edits(candidate)):
        return Verdict(None, NO_CODE)
    why = backend.refuse(candidate)
    if why:
        return not_verified(why)
    try:
        outcome = backend.run(candidate)
    except Exception as exc:  # the tool's own trouble: said, never at the cost of the user's report
        return not_verified(f"{type(exc).__name__} in the replay")
    return judge(outcome)
