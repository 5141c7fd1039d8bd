"""Where a silent finding's low precision was chosen: the dtype birth of the module it surfaced in.

An overflow, an underflow or a wrong value found by the numerics monitor names the module and the
op, and the tensors there were made by the model's own layers: no operand carries a birth the user
wrote. Their float16/bfloat16 is the dtype of the module's parameters, and those were given it at
one line (a module-wide `.half()`, `.to(torch.bfloat16)`, a loader's `torch_dtype`). That line is
where the precision of the whole computation was decided: the root of a finding that exists only
because the module computes in that dtype.
"""

from __future__ import annotations

from typing import Any

import torch

from ..report import Evidence, Finding, Report
from .intent import LOW, asked_at
from .provenance import Provenance, where

SILENT = ("fp16-overflow", "fp16-underflow", "nonfinite-values", "finite-but-wrong", "fp16-headroom")


def _has_birth(f: Finding) -> bool:
    return any(o.origin is not None and o.origin.file for o in f.operands)


def _module_at(names: Any, path: str) -> Any:
    found = names.ancestors(path)
    return found[0][1] if found and found[0][0] == path else None


def low_parameter(module: Any) -> torch.Tensor | None:
    """The module's first float16/bfloat16 parameter or buffer (its own, else a child's)."""
    try:
        tensors = [*module.parameters(), *module.buffers()]
    except Exception:
        return None
    return next((t for t in tensors if t.is_floating_point() and t.dtype in LOW), None)


def birth_of(t: torch.Tensor, prov: Provenance) -> dict[str, Any] | None:
    """{how: `a module-wide .half() at x.py:9`, file, line} when the code asked for t's dtype."""
    tag = prov.lookup(t)
    at = asked_at(tag) if tag is not None else None
    if tag is None or at is None:
        return None
    file, line, _ = where(tag.user or tag.frame)
    return {"how": at, "file": file, "line": line}


def annotate(report: Report, names: Any, prov: Provenance, start: int = 0) -> None:
    """Add, to each silent finding from `start` on that names a module and no operand birth, where
    that module's low dtype was asked for (evidence, and `data["dtype_birth"]`)."""
    for f in report.findings[start:]:
        loc = f.location
        if f.code not in SILENT or loc is None or loc.module is None or _has_birth(f):
            continue
        module = _module_at(names, loc.module)
        param = low_parameter(module) if module is not None else None
        found = birth_of(param, prov) if param is not None else None
        if found is None:
            continue
        dtype = str(param.dtype).removeprefix("torch.")
        place = f"'{loc.module}'" if loc.module else "the model"
        f.evidence.append(Evidence(text=f"{dtype} is the dtype of the parameters of {place}: {found['how']}"))
        f.data["dtype_birth"] = found
