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


@dataclass
class Cause:
    label: str
    candidates: list[Candidate] = field(default_factory=list)
