"""The report's fixes made edits (processors.present): each Python fix with a place in a user file
carries the edits its paste makes, in ruff's shape, and a diff; fixes with edits rank ahead of
advice (a command, a setting), a fix known to fail never first, a fix that writes what an earlier
one writes (the experiment's cure) shown once. No torch import."""

from __future__ import annotations

import copy
import dataclasses

from ..editing.fix_edits import effect, small_diff, to_json
from ..report import Finding, Fix, Report
from .plan import Planner
from .shown import shown_fixes


def rank(fix: Fix) -> int:
    """A fix's place in its finding's list (stable within a rank): proven by a replay first, then
    the fixes that are edits, then advice; a fix a replay saw fail last."""
    if fix.verified is False:
        return 3
    return 0 if fix.verified else 1 if fix.edits else 2


def attach_edits(report: Report) -> Report:
    """Each shown Python fix of a user-file finding with its edits (ruff's shape), and in every
    finding the fixes in `rank` order (verified, edits, advice: a fix with no edit, failing last); a fix that already carries edits (the experiment's cure) keeps them. A report with no
    fix to place comes back as it is."""
    if report.tool in ("explain", "audit", "env", "compare", "merge", "numerics"):
        return _failing_last(report)  # no fix of these has a place in a file of the user's
    planner = Planner(since_ns=report.started_ns)
    findings: list[Finding] = []
    changed = False
    for f in report.findings:
        placed: dict[int, list[dict]] = {}
        try:
            for s in shown_fixes(f, planner.source, planner.births(f)):
                if s.fix is None or s.fix.edits:
                    continue
                cand = planner.with_import_edits([s.edit, *s.more])
                placed[id(s.fix)] = [
                    to_json(planner.sources[e.path], e) for e in cand if planner.sources.get(e.path)
                ]
        except (OSError, ValueError, SyntaxError):
            placed = {}
        fixes = []
        seen: set[tuple] = set()
        for x in f.fixes:
            edits = x.edits or placed.get(id(x), [])
            made = effect(edits) if edits else ()
            if made and made in seen:
                continue  # writes what a fix before it writes (the experiment's cure): shown once
            seen.add(made)
            if id(x) in placed:
                x = dataclasses.replace(x, edits=edits, diff=small_diff(edits))
            fixes.append(x)
        ordered = sorted(fixes, key=rank)
        if ordered != f.fixes or placed:
            changed = True
            f = dataclasses.replace(f, fixes=ordered)
        findings.append(f)
    if not changed:
        return report
    out = copy.copy(report)
    out.meta, out.sections, out.findings = dict(report.meta), list(report.sections), findings
    return out


def _failing_last(report: Report) -> Report:
    """Each finding's fixes in their order, those a replay found failing last."""

    def order(fixes: list[Fix]) -> list[Fix]:
        return [*(x for x in fixes if x.verified is not False), *(x for x in fixes if x.verified is False)]

    if all(order(f.fixes) == f.fixes for f in report.findings):
        return report
    out = copy.copy(report)
    out.meta, out.sections = dict(report.meta), list(report.sections)
    out.findings = [dataclasses.replace(f, fixes=order(f.fixes)) for f in report.findings]
    return out
