"""Fixes at the site a finding's odd operand got its dtype, where that site is not a tensor's birth:
the seam of a dtype autocast chose by design (index_write), the assignment that read a dtype off an
int8 weight (read_dtype); and the integer store that floats are written into, which is the odd side.
"""

from __future__ import annotations

from types import FrameType
from typing import Any

import torch

from .. import causes, remedies
from ..dtypes import canonical
from ..report import Finding, Operand
from . import index_write, read_dtype


def integer_store(operands: list[Any], floats: list[Any]) -> bool:
    """Floats of one dtype written into an integer destination (not bool, not an index): mark the
    destination the odd operand and say so."""
    if not floats or len({s.tensor.dtype for s in floats}) != 1:
        return False
    dst = next((s for s in operands if s.role == "destination"), None)
    t = dst.tensor if dst is not None else None
    if t is None or t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        return False
    for s in operands:
        s.odd = s is dst
    return True


def at_sites(
    finding: Finding, blamed: Operand, expected: torch.dtype | None, op_frame: FrameType | None
) -> None:
    """Put first the fix at the odd dtype's site: the write, when autocast made the values half and
    the user's line (`op_frame`) writes them; the dtype's assignment, when it was read off int8."""
    origin = blamed.origin
    if origin is None:
        return
    if op_frame is not None and causes.root_origin(origin, canonical(expected)).kind == "autocast":
        finding.fixes = remedies.first(finding.fixes, index_write.seam_fix(op_frame, blamed.dtype))
    finding.fixes = remedies.first(finding.fixes, read_dtype.fix(origin, expected))
