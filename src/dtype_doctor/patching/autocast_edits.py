"""Edits at an autocast birth: the op whose low dtype autocast chose, computed in float32 there.

A tensor that autocast made bfloat16/float16 (a matmul, a linear, a log_softmax left in the
region's dtype) and that a later op needs in float32 (a loss with no half kernel, an fp32 consumer)
is fixed where autocast chose its dtype, never by lowering the consumer: an op that takes dtype=
gets `dtype=torch.float32`; any other op is run with its operands `.float()` inside
`torch.autocast(device_type=..., enabled=False)`. The region's device comes from its own `with`.
No torch import.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Protocol

from ..editing import finders as find
from ..editing.custom_bwd import decorated_by
from ..editing.fix_edits import shown_path
from ..editing.source import Edit, Source, add_kwarg, call_name, is_atom
from ..report import Finding, Operand, Origin
from ..tracing.casts import RAISING_METHODS
from .candidates import Candidate

LOW = ("float16", "bfloat16")
# ops whose dtype= computes them in a wider dtype than their input
DTYPE_ARG = frozenset({"softmax", "log_softmax", "cumsum", "cumprod", "sum", "mean", "prod", "nansum"})
DEVICE = re.compile(r"autocast\(\s*(?:device_type\s*=\s*)?(['\"])(\w+)\1")


class _Sources(Protocol):
    def source(self, path: str | None) -> Source | None: ...


def autocast_births(origin: Origin, depth: int = 0) -> Iterator[Origin]:
    """The autocast births along an origin's lineage, nearest the failing op first."""
    if origin.kind == "autocast":
        yield origin
    if depth < 12:
        for c in origin.chain:
            if c.kind != "call" and c.dtype == origin.dtype:
                yield from autocast_births(c, depth + 1)


def region_device(origin: Origin) -> str | None:
    """'cpu' for a birth inside `torch.autocast('cpu', ...)` (the region's chain entry)."""
    for c in origin.chain:
        if c.kind == "call" and c.name and "autocast" in c.name:
            m = DEVICE.search(c.name)
            if m:
                return m.group(2)
    return None


def needs_wider(f: Finding, operand: Operand) -> bool:
    """The failing op needs the operand wider than autocast made it: it raised for the low dtype
    (no half kernel), or the other floating operands are float32."""
    text = f"{f.message} {f.data.get('error', '')}"
    if "not implemented for" in text:
        return True
    others = {o.dtype for o in f.operands if o is not operand and o.dtype in ("float32", "float64")}
    return bool(others) and f.data.get("expected_dtype") in (None, "float32", "float64")


def candidates(sources: _Sources, f: Finding) -> Iterator[Candidate]:
    """For each low operand born under autocast: float32 at each of its autocast births in user files."""
    for operand in f.operands:
        if operand.dtype not in LOW or operand.origin is None or not needs_wider(f, operand):
            continue
        for birth in autocast_births(operand.origin):
            src = sources.source(birth.file)
            if src is None or birth.line is None:
                continue
            yield from at_birth(src, birth, region_device(birth))


def at_birth(src: Source, birth: Origin, device: str | None) -> Iterator[Candidate]:
    op = (birth.op or "").rsplit(".", 1)[-1]
    where = f"{birth.file}:{birth.line}"
    calls = [c for c in find.calls_on(src, birth.line or 0) if call_name(c.func).rsplit(".", 1)[-1] == op]
    if op in DTYPE_ARG and calls and not any(k.arg == "dtype" for k in calls[0].keywords):
        edit = add_kwarg(src, calls[0], "dtype", "torch.float32")
        if edit is not None:
            yield Candidate(f"compute `{op}` in float32 with dtype=torch.float32 ({where})", [edit])
            return
    if device is None:
        return
    stmt = src.statement_at(birth.line or 0)
    if stmt is None or not isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Return, ast.Expr)):
        return
    operands = operands_of(stmt, op)
    if not operands:
        return
    yield Candidate(
        f"compute `{op}` in float32: its operands .float() inside torch.autocast(enabled=False) ({where})",
        [wrapped_in_fp32(src, stmt, operands, device)],
    )


def operands_of(stmt: ast.stmt, op: str) -> list[ast.expr]:
    """The tensor operands of the op on the statement: a `@`'s two sides, a call's positional args
    (a method call's receiver too); those already `.float()`ed count as done."""
    found: list[ast.expr] = []
    for node in ast.walk(stmt):
        if (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.MatMult)
            and op in ("matmul", "__matmul__")
        ):
            found += [node.left, node.right]
        elif isinstance(node, ast.Call) and call_name(node.func).rsplit(".", 1)[-1] == op:
            found += [a for a in node.args if not isinstance(a, (ast.Constant, ast.Starred))]
            if op in ("matmul", "mm", "bmm", "baddbmm", "addmm") and isinstance(node.func, ast.Attribute):
                found.append(node.func.value)
        elif isinstance(node, ast.Call) and op in ("linear", "conv1d", "conv2d", "conv3d") and not found:
            found += [a for a in node.args[:1] if not isinstance(a, (ast.Constant, ast.Starred))]
    if not found and isinstance(stmt, (ast.Assign, ast.Return)) and isinstance(stmt.value, ast.Call):
        found = [a for a in stmt.value.args[:1] if not isinstance(a, (ast.Constant, ast.Starred))]
    return found


def _wrapped(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in RAISING_METHODS
        and not node.args
    )


def wrapped_in_fp32(src: Source, stmt: ast.stmt, operands: list[ast.expr], device: str) -> Edit:
    """The statement, its operands `.float()`, in `with torch.autocast(device_type=D, enabled=False):`."""
    start = src.offset(stmt.lineno, 0)
    end = src.offset(stmt.end_lineno or stmt.lineno, stmt.end_col_offset or 0)
    text = src.text[start:end]
    for node in sorted(operands, key=lambda n: src.span(n)[0], reverse=True):
        if _wrapped(node):
            continue
        a, b = src.span(node)
        seg = src.text[a:b]
        text = (
            text[: a - start]
            + (f"{seg}.float()" if is_atom(node) else f"({seg}).float()")
            + text[b - start :]
        )
    indent = src.indent(stmt.lineno)
    body = "".join(indent + "    " + line.lstrip(" ") if i == 0 else "    " + line
                   for i, line in enumerate(text.splitlines(keepends=True)))  # fmt: skip
    head = f'{indent}with torch.autocast(device_type="{device}", enabled=False):  # float32 here\n'
    return Edit(src.path, start, end, head + body)


def off_regions(sources: _Sources, f: Finding) -> Iterator[Candidate]:
    """A `with torch.autocast(...)` around the user's call that does nothing for the failing op's
    tensors: it names another device (a "cuda" region over CPU tensors turns itself off, as does
    `torch.cuda.amp.autocast()`). The region made one for the tensors' device, tried first: it was
    entered before any op of it ran."""
    device = f.data.get("device")
    if not isinstance(device, str) or not device:
        return
    seen: set[tuple[str, int]] = set()
    for key in f.data.get("user_stack") or ():
        path, _, line = str(key).rpartition(":")
        src = sources.source(path)
        found = find.autocast_with(src, int(line)) if src is not None and line.isdigit() else None
        if found is None or (path, found[0].lineno) in seen:
            continue
        seen.add((path, found[0].lineno))
        edit = _region_for(src, found[1].context_expr, device)  # type: ignore[arg-type]
        if edit is not None:
            where = f"{shown_path(path)}:{found[0].lineno}"
            yield Candidate(
                f"make the autocast region at {where} one for {device} tensors: as written it is off for them",
                [edit],
                first=True,
            )


def _region_for(src: Source, call: ast.expr, device: str) -> Edit | None:
    """The autocast call's device made `device`; None when it already names it (or a variable)."""
    if not isinstance(call, ast.Call):
        return None
    name = call_name(call.func)
    if name.endswith("cuda.amp.autocast") and device != "cuda":
        start, end = src.span(call.func)
        if src.text[end : end + 1] != "(":
            return None
        rest = ", " if call.args or call.keywords else ""
        return Edit(src.path, start, end + 1, f'torch.autocast("{device}"{rest}')
    given = next(
        (k.value for k in call.keywords if k.arg == "device_type"), call.args[0] if call.args else None
    )
    if (
        isinstance(given, ast.Constant)
        and isinstance(given.value, str)
        and given.value.split(":")[0] != device
    ):
        start, end = src.span(given)
        return Edit(src.path, start, end, f'"{device}"')
    return None


def custom_fwd_inputs(planner: _Sources, f: Finding) -> Iterator[Candidate]:
    """The failing op ran in (or below) the `forward` of a custom autograd Function decorated with
    `custom_fwd` and no `cast_inputs`: under autocast its inputs arrive in whatever dtypes the region
    made them, and the Function's own ops (a kernel autocast does not know) mix them.
    `cast_inputs=torch.float32` is that decorator's own decision: the forward then runs on float32
    inputs with autocast off. Tried first (`Candidate.first`)."""
    seen: set[int] = set()
    for place in f.data.get("user_stack") or ():
        path, _, line = str(place).rpartition(":")
        src = planner.source(path)
        fn = find.enclosing_function(src, int(line)) if src is not None and line.isdigit() else None
        if src is None or fn is None or fn.name != "forward":
            continue
        dec = next((d for d in fn.decorator_list if decorated_by(d, "custom_fwd")), None)
        if (
            not isinstance(dec, ast.Call)
            or id(dec) in seen
            or any(k.arg == "cast_inputs" for k in dec.keywords)
        ):
            continue
        seen.add(id(dec))
        edit = add_kwarg(src, dec, "cast_inputs", "torch.float32")
        if edit is not None:
            yield Candidate(
                f"give the `custom_fwd` on `forward` cast_inputs=torch.float32 ({shown_path(src.path)}:{dec.lineno})",
                [edit],
                first=True,
            )
