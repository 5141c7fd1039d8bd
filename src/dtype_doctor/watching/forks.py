"""Processes forked while watching (DataLoader workers, os.fork) are not watched: say so.

A forked child inherits the watcher, but its findings would stay in the child's copy of the report
and vanish with it. So the child stops watching (it runs the user's code exactly as unwatched) and
the parent's report says how many children ran unwatched, as it does for compiled regions.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ..catalog.family_codes import CHILD_PROCESS_UNWATCHED

if TYPE_CHECKING:
    from ..report import Finding

_notices: list[ForkNotice] = []


class ForkNotice:
    """Counts the forks made while one session runs."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.forks = 0
        _notices.append(self)

    def finding(self) -> Finding | None:
        """The finding for the session's report (None without forks); stops counting."""
        if self in _notices:
            _notices.remove(self)
        if self.forks <= 0:
            return None
        from .. import catalog

        return catalog.finding(
            CHILD_PROCESS_UNWATCHED,
            names={"forks": self.forks},
            message=f"{self.forks} process(es) forked while watching (DataLoader workers, os.fork) ran "
            "unwatched: silent promotions and mismatches in them are not in this report",
            data={"forks": self.forks},
        )


def _in_parent() -> None:
    for notice in _notices:
        notice.forks += 1


def _in_child() -> None:
    for notice in _notices:
        notice.session.active = False  # the mode and hooks pass everything straight through
    _notices.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_parent=_in_parent, after_in_child=_in_child)
