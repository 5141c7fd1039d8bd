"""A failure downstream of a silent promotion the watch already reported: the promotion's wide
operand (a plain attribute `.half()` skipped, a parameter left float32) is the failure's root too.

The promotion finding read that operand where it met the low one (its birth: the attribute's
assignment, the parameter's module); the failing op sees only the promoted result, whose lineage
stops at the factory that made the wide tensor's values. The failure's origin gets the promotion
finding's odd operand in its chain, so both findings share one root cause, and the promotion's fixes
at that root come ahead of the failure's own (a cast of the whole model, which leaves the inputs
behind, is not the first to try)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import replace

from ..catalog.family_codes import SILENT_PROMOTION
from ..catalog.shared_remedies import CAST_AT_BIRTH, MAKE_AT_BIRTH
from ..report import Finding, Origin
from ..verifying.contract import has_code


def _nodes(origin: Origin, depth: int = 0) -> Iterator[Origin]:
    yield origin
    if depth < 12:
        for c in origin.chain:
            yield from _nodes(c, depth + 1)


def _wide_operand(promotion: Finding, dtype: str | None) -> Origin | None:
    """The promotion finding's operand of the promoted dtype (the one that widened the result)."""
    return next((o.origin for o in promotion.operands if o.origin is not None and o.dtype == dtype), None)


def link(findings: list[Finding], failed: Finding) -> None:
    """Give `failed` (an error) the root of an earlier silent promotion its odd operand came from:
    the promotion's wide operand grafted into its lineage, that finding's fixes with code first."""
    earlier = {
        (f.location.file, f.location.line, f.location.op): f
        for f in findings
        if f.code == SILENT_PROMOTION and f is not failed and f.location is not None
    }
    if not earlier:
        return
    linked: list[Finding] = []
    for operand in failed.operands:
        for node in list(_nodes(operand.origin)) if operand.origin is not None else ():
            found = earlier.get((node.file, node.line, node.op)) if node.kind == "promotion" else None
            wide = _wide_operand(found, node.dtype) if found is not None else None
            if found is None or wide is None:
                continue
            _graft(node, copy.deepcopy(wide))
            if found not in linked:
                linked.append(found)
            break  # this operand's nearest promotion: its root
    for found in reversed(linked):
        _fixes_first(failed, found)


def _graft(node: Origin, wide: Origin) -> None:
    """`wide` in place of the promotion's first parent of its own dtype (the one its root follows)."""
    at = next((i for i, c in enumerate(node.chain) if c.kind != "call" and c.dtype == node.dtype), None)
    if at is None:
        node.chain.insert(0, wide)
    else:
        node.chain[at] = wide


_AT_BIRTH = {CAST_AT_BIRTH.why, MAKE_AT_BIRTH.why}


def _fixes_first(failed: Finding, promotion: Finding) -> None:
    """The promotion's fixes that edit code (copies: each finding's labels are its own) ahead."""
    taken = {x.snippet.strip() for x in failed.fixes}
    ahead = [
        replace(x, verified=None, verification=None)
        for x in promotion.fixes
        if x.language == "python" and has_code(x.snippet) and x.snippet.strip() not in taken
    ]
    births = [x for x in failed.fixes if x.why in _AT_BIRTH]  # an edit at the birth stays the first
    failed.fixes = [*births, *ahead, *(x for x in failed.fixes if x.why not in _AT_BIRTH)]
