"""A silent promotion the same statement casts back: `(result + lora(x)).to(result.dtype)`.

A float16/bfloat16 tensor meeting a float32 one gives float32; when the statement that made the
promotion casts its result back to its low operand's dtype, nothing float32 leaks out of it: the
promotion only computes that expression in float32 (peft's LoRA layers, a DoRA scale, a residual
added in float32). Such a finding is told (info), not blamed: it is no mixed-precision problem.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from ..catalog.family_codes import SILENT_PROMOTION
from ..numerics.frames import user_line, where
from ..report import Report, Severity

_LOW = (torch.float16, torch.bfloat16)


class CastBack:
    """The promotion findings of a report by their user line, to find those a cast on it sends back."""

    def __init__(self) -> None:
        self._seen = 0  # findings of the report indexed
        self._at: dict[tuple[str, int], list[Any]] = {}

    def _index(self, report: Report) -> None:
        for f in report.findings[self._seen :]:
            loc = f.location
            if f.code == SILENT_PROMOTION and loc is not None and loc.file and loc.line:
                self._at.setdefault((os.path.abspath(loc.file), loc.line), []).append(f)
        self._seen = len(report.findings)

    def cast(self, report: Report, inputs: Any, out: Any) -> None:
        """A cast ran (`inputs[0]` → `out`): the promotions of its line whose low operand has the
        dtype it casts down to are cast back in their statement."""
        src = inputs[0] if inputs else None
        if not isinstance(out, torch.Tensor) or out.dtype not in _LOW or not isinstance(src, torch.Tensor):
            return
        if src.dtype.itemsize <= out.dtype.itemsize or not src.is_floating_point():
            return
        if len(report.findings) != self._seen:
            self._index(report)
        if not self._at:
            return
        file, line = user_line()
        waiting = self._at.get((file, line)) if file and line else None  # type: ignore[arg-type]
        if not waiting:
            return
        low, wide = (str(d).replace("torch.", "") for d in (out.dtype, src.dtype))
        for finding in waiting:
            dtypes = {o.dtype for o in finding.operands}
            if finding.severity == Severity.INFO or low not in dtypes or wide not in dtypes:
                continue
            finding.severity = Severity.INFO
            finding.message += (
                f" The statement casts the result back to {low} ({where(file, line)}): the promotion "
                f"only computes that expression in {wide}, nothing leaks."
            )
            finding.data["cast_back"] = where(file, line)
