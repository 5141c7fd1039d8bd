"""NumPy has no bfloat16 (nor float8): `t.numpy()` on a tensor of a model run in bf16 raises
`TypeError: Got unsupported ScalarType BFloat16` far from where bf16 was chosen. The crash is
completed here, from the user's frame that raised: the tensor the line converts (its origin leads to
the model's conversion), and the line itself with `.float()` before `.numpy()`, which holds every
bfloat16 value exactly (nothing lowered, the model stays in its dtype).
"""

from __future__ import annotations

import ast
from types import FrameType
from typing import Any

import torch

from .. import remedies
from ..catalog.shared_remedies import WIDEN_FOR_NUMPY
from ..dtypes import canonical
from ..numerics.opsource import statement
from ..report import Finding, Operand
from .provenance import short_path


def _base_name(expr: ast.expr) -> str | None:
    """The variable an expression starts from (`weights` in `-weights[b].cpu()`)."""
    while True:
        if isinstance(expr, ast.Name):
            return expr.id
        if isinstance(expr, (ast.Attribute, ast.Subscript)):
            expr = expr.value
        elif isinstance(expr, ast.Call):
            expr = expr.func
        elif isinstance(expr, ast.UnaryOp):
            expr = expr.operand
        else:
            return None


def _numpy_calls(stmt: ast.stmt) -> list[ast.Call]:
    return [
        n
        for n in ast.walk(stmt)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "numpy"
        and not n.args
    ]


def complete(finding: Finding, frame: FrameType, origin_of: Any) -> None:
    """The finding of a NumPy conversion that raised at `frame`'s line: its tensor and the widened line."""
    found = statement(frame.f_code.co_filename, frame.f_lineno)
    if found is None:
        return
    text, stmt = found
    calls = _numpy_calls(stmt)
    names = [n for n in (_base_name(c.func.value) for c in calls) if n]  # type: ignore[attr-defined]
    held = [(n, frame.f_locals.get(n, frame.f_globals.get(n))) for n in names]
    tensors = [(n, t) for n, t in held if isinstance(t, torch.Tensor) and t.dtype.itemsize < 4]
    if not tensors:
        return
    name, tensor = tensors[0]
    finding.operands = [
        Operand(
            role="tensor",
            dtype=canonical(tensor.dtype),
            shape=list(tensor.shape),
            name=name,
            origin=origin_of(tensor),
        )
    ]
    if stmt.lineno != stmt.end_lineno:
        return  # one line replaced by one line
    for call in calls:
        receiver = call.func.value  # type: ignore[attr-defined]
        call.func.value = ast.Call(ast.Attribute(receiver, "float", ast.Load()), [], [])  # type: ignore[attr-defined]
    indent = text[: len(text) - len(text.lstrip())]
    fix = remedies.make(
        WIDEN_FOR_NUMPY,
        file=short_path(frame.f_code.co_filename),
        line=stmt.lineno,
        made=indent + ast.unparse(stmt),
        dtype=canonical(tensor.dtype),
        name=name,
    )
    finding.fixes = remedies.first(finding.fixes, fix)
