"""What the planner proposes: a cause of a report and the candidate edits that may fix it."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..editing.source import Edit


@dataclass
class Candidate:
    """One way to fix a cause: a title the user reads and the edits it makes."""

    title: str
    edits: list[Edit]
    # tried before the lineage order: an edit that completes a cast the code already makes (a
    # `.to(device)` given the dtype it left out), or that changes the failing tensor alone where it
    # took another tensor's dtype (`out = x.new_empty(n)`), not that other tensor everywhere
    first: bool = False
    # the whole model in float32: it cures any seam at twice the weights' memory, so it is tried only
    # after every narrower edit (and chain of edits) has failed
    broad: bool = False
    dtype: str | None = None  # the dtype it gives the odd operands (planner.toward), when it says


@dataclass
class Cause:
    label: str
    candidates: list[Candidate] = field(default_factory=list)


def only(causes: list[Cause], broad: bool) -> list[Cause]:
    """Each cause with just its broad (or just its narrow) candidates; causes left with none dropped."""
    kept = [Cause(c.label, [k for k in c.candidates if k.broad == broad]) for c in causes]
    return [c for c in kept if c.candidates]
