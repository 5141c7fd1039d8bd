"""A promotion cast back before its module call returns is a deliberate float32 island, not a silent
promotion: an RMSNorm that takes its variance in float32 and returns the input's dtype, a matcher
that computes its costs in float32 and returns indices. Such a finding stands only when the
promoted dtype leaves the module call it happened in (one of the call's outputs has it); when the
call returns tensors and none of them has it, the finding is taken back."""

from __future__ import annotations

import functools
from typing import Any

import torch

from ..report import Severity
from .failures import withdraw
from .intent import LOW, deliberate, upcast_from_low

_DEPTH = 3  # containers looked into for the call's output tensors
_ITEMS = 64  # items per container looked at


def judge(session: Any, finding: Any, operands: list[torch.Tensor]) -> None:
    """A promotion was reported: note whether its wide operands were all raised from float16/bfloat16
    on purpose (`x.float()` on a half activation), and judge it again when the running module call
    returns."""
    if session.mode != "observe" or finding is None:
        return
    wide_operands = [t for t in operands if t.dtype not in LOW]
    if wide_operands and all(upcast_from_low(session.prov.lookup(t)) for t in wide_operands):
        finding.data.setdefault("deliberate_upcast", deliberate(wide_operands[0], session.prov) or "")
    wide = functools.reduce(torch.promote_types, {t.dtype for t in operands})
    session.stack.on_return(lambda output: _settle(session, finding, wide, output))


def settle_deliberate(session: Any, failed: bool) -> None:
    """The run ended without an error: a promotion whose float32 side was raised from float16/bfloat16
    on purpose is what the code asked for; it stays in the report as information, not a warning."""
    if failed or session.report.errors:
        return
    for finding in session.report.findings:
        said = finding.data.pop("deliberate_upcast", None)
        if said is not None and finding.severity == Severity.WARNING:
            finding.severity = Severity.INFO
            finding.message += f" (intent: {said or 'the float32 operand was upcast on purpose'})"


def _settle(session: Any, finding: Any, wide: torch.dtype, output: Any) -> None:
    found: list[torch.Tensor] = []
    _tensors(output, 0, found)
    if found and all(t.dtype != wide for t in found):
        withdraw(session, finding)


def _tensors(value: Any, depth: int, found: list[torch.Tensor]) -> None:
    if isinstance(value, torch.Tensor):
        found.append(value)
    elif depth < _DEPTH:
        if isinstance(value, (list, tuple)):
            for item in value[:_ITEMS]:
                _tensors(item, depth + 1, found)
        elif isinstance(value, dict):
            for item in list(value.values())[:_ITEMS]:
                _tensors(item, depth + 1, found)
