"""The fix at the statement that gave trained or updated tensors their low dtype: keep them float32.

A parameter an optimizer updates, or a buffer a module updates in place (BatchNorm's running stats),
stops moving when its dtype is float16/bfloat16 and each update is below half its spacing. Its dtype
was given by one statement of the user's: a model-wide `.to(...)`/`.half()`, a
`load_state_dict(..., assign=True)` of a low-precision checkpoint, or a loop casting each parameter
(`param.data = param.data.to(torch.bfloat16)`). The fix is that statement kept, and then:

- parameters: the trainable ones cast back to float32 right after it (float32 master weights; the
  frozen ones keep the low dtype), or, for a per-parameter cast, the trainable ones not cast;
- buffers: the module that updates them kept in float32 through the cast (`keep_in_fp32`), its
  outputs cast back to the model's dtype.

Source only (no torch import): the snippet is written from the statement's own text.
"""

from __future__ import annotations

import ast
import os

from ..tracing.casts import MODULE_LOWERING, cast_call
from . import opsource


def _full(file: str) -> str:
    return file if os.path.isabs(file) else os.path.abspath(file)


def _cast_call(node: ast.expr | None) -> ast.Call | None:
    """The outermost `x.to(...)`/`x.half()`/... call of an expression."""
    if cast_call(node, MODULE_LOWERING):
        return node
    return None


def _held_model(stmt: ast.stmt) -> str | None:
    """The name the statement's module is held by: the target of `model = Net().to(...)`, the receiver
    of `model.to(...)` or `model.load_state_dict(...)`."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.value, ast.Call):
        target = stmt.targets[0]
        if isinstance(target, (ast.Name, ast.Attribute)) and not (
            isinstance(target, ast.Attribute) and target.attr == "data"
        ):
            return ast.unparse(target)
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        func = stmt.value.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, (ast.Name, ast.Attribute)):
            return ast.unparse(func.value)
    return None


def _per_tensor(text: str, stmt: ast.stmt) -> str | None:
    """`param.data = param.data.to(torch.bfloat16)` → the same statement for the frozen parameters
    only: `param.data = param.data.float() if param.requires_grad else param.data.to(torch.bfloat16)`."""
    if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
        return None
    target = stmt.targets[0]
    cast = _cast_call(stmt.value)
    if not isinstance(target, ast.Attribute) or target.attr != "data" or cast is None:
        return None
    tensor = ast.unparse(target.value)
    source = ast.unparse(cast.func.value)  # type: ignore[attr-defined]
    value = ast.unparse(stmt.value)
    return f"{ast.unparse(target)} = {source}.float() if {tensor}.requires_grad else {value}"


def trainable_fp32(file: str | None, line: int | None) -> str | None:
    """The statement at `file:line`, which made trained parameters low-precision, with the trainable
    ones kept (or cast back to) float32; None when the statement shows no module or parameter."""
    if not file or not line:
        return None
    found = opsource.statement(_full(file), line)
    if found is None:
        return None
    text, stmt = found
    one = _per_tensor(text, stmt)
    if one is not None:
        return one
    model = _held_model(stmt)
    if model is None:
        return None
    return (
        f"{text}\n"
        f"for _p in {model}.parameters():  # the trained parameters back to float32 (master weights)\n"
        "    if _p.requires_grad:\n"
        "        _p.data = _p.data.float()"
    )


def state_fp32(file: str | None, line: int | None, kept: str, dtype_name: str) -> str | None:
    """The statement at `file:line`, which made a module's updated buffers low-precision, followed by
    that module (`kept`, its path in the model) kept in float32 with its outputs cast to `dtype_name`."""
    if not file or not line or not kept:
        return None
    found = opsource.statement(_full(file), line)
    if found is None:
        return None
    text, stmt = found
    model = _held_model(stmt)
    if model is None:
        return None
    return (
        f"{text}\n"
        "from dtype_doctor.numerics import keep_in_fp32\n"
        f"keep_in_fp32({model}, {[kept]!r}, out_dtype=torch.{dtype_name})"
    )
