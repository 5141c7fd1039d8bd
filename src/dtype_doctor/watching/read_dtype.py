"""A dtype read off a tensor that is not in a compute dtype: `dtype = self.output.weight.dtype` after
int8 weight-only quantization made that weight int8, so a cache allocated with it is int8 and the first
float write into it fails far from the line that chose it.

While the dtype value's lineage is followed (dtype_values.resolve, the frames still live), an
assignment `name = <expr>.dtype` whose `<expr>` is an integer (or bool) tensor is remembered with the
floating tensors its owning module holds beside it (a quantized layer keeps its scales in the model's
dtype). When a finding's odd operand was born in that dtype, the fix rewrites the assignment to read
the dtype off such a sibling in the dtype wanted, else to name the dtype wanted.
"""

from __future__ import annotations

import ast
from types import FrameType
from typing import NamedTuple

import torch
from torch import nn

from .. import remedies
from ..catalog.shared_remedies import CHOOSE_DTYPE
from ..report import Fix, Origin
from .provenance import short_path

_MAX_KEPT = 256


class Read(NamedTuple):
    """An assignment that read a dtype off a non-floating tensor, and where to read it instead."""

    target: str  # the name assigned
    tensor: str  # the expression whose `.dtype` was read (`self.output.weight`)
    siblings: dict[str, str]  # dtype name → an expression reading a floating sibling's dtype


_reads: dict[tuple[str, int], Read] = {}


def _evaluate(frame: FrameType, expr: ast.expr) -> object:
    """A name or an attribute chain read in the frame (attribute lookups only, no call); None else."""
    if isinstance(expr, ast.Name):
        return frame.f_locals.get(expr.id, frame.f_globals.get(expr.id))
    if isinstance(expr, ast.Attribute):
        owner = _evaluate(frame, expr.value)
        return getattr(owner, expr.attr, None) if owner is not None else None
    return None


def record(frame: FrameType, line: int, source: str) -> None:
    """The statement `source` at `line` of the frame's file assigned a dtype: remember it when it
    read the dtype off a non-floating tensor (the frame is live, its objects readable)."""
    try:
        stmt = ast.parse(source.strip()).body[0]
    except (SyntaxError, IndexError):
        return
    if not (
        isinstance(stmt, ast.Assign)
        and len(stmt.targets) == 1
        and isinstance(stmt.targets[0], ast.Name)
        and isinstance(stmt.value, ast.Attribute)
        and stmt.value.attr == "dtype"
    ):
        return
    tensor = _evaluate(frame, stmt.value.value)
    if not isinstance(tensor, torch.Tensor) or tensor.is_floating_point() or tensor.is_complex():
        return
    siblings: dict[str, str] = {}
    base = stmt.value.value
    owner = _evaluate(frame, base.value) if isinstance(base, ast.Attribute) else None
    if isinstance(owner, nn.Module):
        held = [*owner.named_parameters(recurse=False), *owner.named_buffers(recurse=False)]
        for name, t in held:
            if t is not None and t.is_floating_point() and name.isidentifier():
                siblings.setdefault(str(t.dtype)[6:], f"{ast.unparse(base.value)}.{name}.dtype")
    if len(_reads) < _MAX_KEPT:
        key = (short_path(frame.f_code.co_filename), line)
        _reads[key] = Read(stmt.targets[0].id, ast.unparse(base), siblings)


def _value_sites(origin: Origin) -> list[Origin]:
    found, out = origin, []
    for _ in range(16):
        found = next((c for c in found.chain if c.kind == "value"), None)
        if found is None:
            break
        out.append(found)
    return out


def fix(origin: Origin | None, want: torch.dtype | None) -> Fix | None:
    """The assignment that read the odd dtype off a non-floating tensor, reading `want` instead."""
    if origin is None or want is None or not want.is_floating_point:
        return None
    for site in reversed(_value_sites(origin)):
        read = _reads.get((site.file or "", site.line or 0))
        if read is None:
            continue
        name = str(want)[6:]
        value = read.siblings.get(name, f"torch.{name}")
        return remedies.make(
            CHOOSE_DTYPE,
            file=site.file,
            line=site.line,
            made=f"{read.target} = {value}",
            tensor=read.tensor,
            have=origin.dtype or "?",
            want=name,
        )
    return None
