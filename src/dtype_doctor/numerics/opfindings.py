"""An op-level problem (`opwatch.Hit`) as a Finding: the family, the user's line, the module as
`run` names it, where the low-precision operand was made, and the catalog's fixes written in the
user's statement (`opsource`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .. import catalog
from ..catalog.family_codes import FINITE_BUT_WRONG, FP16_OVERFLOW, FP16_UNDERFLOW, NONFINITE_VALUES
from ..remedies.places import BIRTH, INPUT, OP
from ..report import Evidence, Finding, Location, Operand, Origin, Severity
from . import limit_source, opsource
from .frames import place, where
from .opwatch import Hit

# kind → (family for float16, family for bfloat16, severity, the cause in plain words)
_KINDS: dict[str, tuple[str, str, str, str]] = {
    "constant-overflow": (
        FP16_OVERFLOW, NONFINITE_VALUES, "error",
        "A Python constant is stored in the tensor's dtype: beyond its range it becomes inf, and "
        "a softmax, a sum or a difference over it then gives NaN.",
    ),
    "constant-underflow": (
        FP16_UNDERFLOW, FP16_UNDERFLOW, "warning",
        "A constant written for float32 (an eps, a clamp bound) is 0 in this dtype: the guard it "
        "was written for does nothing, and a division or log of the zeros it lets through is inf.",
    ),
    "constant-rounds": (
        FINITE_BUT_WRONG, FINITE_BUT_WRONG, "warning",
        "A constant written a hair away from a round value (1 - 1e-6) is that round value in this "
        "dtype: a clamp with it keeps nothing away from the edge, and log1p(-1) or 1/(1-1) is inf.",
    ),
    "positions": (
        FINITE_BUT_WRONG, FINITE_BUT_WRONG, "warning",
        "float16 holds every integer only up to 2048, bfloat16 only up to 256: positions, steps or "
        "timesteps made in them above that collapse onto their neighbours, silently.",
    ),
    "cast-rounding": (
        FINITE_BUT_WRONG, FINITE_BUT_WRONG, "warning",
        "A cast down rounds to the dtype's spacing: above 2048 (float16) or 256 (bfloat16) a value "
        "moves by a unit or more (998.39 becomes 1000 in bfloat16), so what depends on its exact "
        "value (a timestep's embedding, a position) is wrong without an error.",
    ),
    "overflow": (
        FP16_OVERFLOW, NONFINITE_VALUES, "error",
        "The op's result is beyond the dtype's range although its operands are finite; float32 "
        "holds it. What reads it next (a clip coefficient, a mean, an IoU) is then inf, 0 or NaN.",
    ),
    "absorbed": (
        FINITE_BUT_WRONG, FINITE_BUT_WRONG, "error",
        "The accumulator is kept in a low dtype: an update smaller than half its spacing at the "
        "accumulator's size is rounded away, so the value stops moving (an EMA that never "
        "updates, gradients or sums that lose the small contributions).",
    ),
}  # fmt: skip


def _short(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _fix_names(hit: Hit, born: Origin | None) -> tuple[set[str], dict[str, Any]]:
    """The context tags and the names the catalog's op-level fixes are written with."""
    kind, op, file, line = hit.problem.kind, hit.op, hit.file, hit.line
    names: dict[str, Any] = {
        "op": op,
        "at": f"at {where(file, line)}",
        "dtype_name": _short(hit.problem.dtype),
        "receiver": opsource.receiver(file, line, op) or "the operand",
    }
    ctx: set[str] = {"op-level"}
    if kind == "positions":
        names["factory"] = opsource.float32_factory(file, line, op)
        if names["factory"]:
            ctx.add("op-factory")
        elif op in ("arange", "range", "linspace"):  # positions made low and kept: an accumulator
            ctx.add("op-absorbed")
        passed = opsource.float32_dtype_argument(*hit.caller)
        if passed:  # the caller chose the dtype: everything the callee makes with it stays float32
            names.update(passed=passed, caller=where(*hit.caller))
            ctx.add("op-caller")
    elif kind == "cast-rounding":
        names["uncast"] = opsource.without_cast(file, line, op)
        if names["uncast"]:
            ctx.add("op-uncast")
    elif kind == "absorbed":
        ctx.add("op-absorbed")
        if born is not None and born.file and born.line:
            names["born"] = f"{born.file}:{born.line}"
            cast = born.op or "to"
            names["born_fix"] = (
                opsource.module_in_float32(born.file, born.line, cast)  # the parameters' own cast
                if born.kind == "parameter"
                else None
            ) or opsource.without_cast(born.file, born.line, cast)
            if names["born_fix"]:
                ctx.add("op-born-fix")
    else:
        limit = torch.finfo(hit.problem.dtype).max if kind == "overflow" else None
        more, written = opsource.float32_names(file, line, op, len(hit.operands), limit)
        ctx |= more
        names.update(written)
        if kind in ("overflow", "constant-overflow"):  # a literal the dtype cannot hold: its own limit
            more, written = limit_source.limit_names(file, line, hit.problem.dtype)
            ctx |= more
            names.update(written)
    at = {OP: place(file, line), BIRTH: place(born.file, born.line) if born is not None else None}
    if names.get("passed"):  # the caller's line, where the dtype it passes is chosen
        at[INPUT] = place(*hit.caller)
    names["places"] = {kind: p for kind, p in at.items() if p is not None}
    return ctx, names


def op_finding(
    hit: Hit,
    name_of: Callable[[str | None], str | None],
    origin_of: Callable[[torch.Tensor], Origin | None] | None,
) -> Finding:
    """The Finding for one op-level problem."""
    p = hit.problem
    fp16, other, severity, cause = _KINDS[p.kind]
    code = fp16 if p.dtype == torch.float16 else other
    module = name_of(hit.module)
    operands = []
    born = None
    for i, t in enumerate(hit.operands[:3]):
        origin = origin_of(t) if origin_of is not None else None
        if origin is not None and born is None and origin.file:
            born = origin
        operands.append(
            Operand(role=f"operand {i}", dtype=_short(t.dtype), shape=list(t.shape), origin=origin)
        )
    ctx, names = _fix_names(hit, born)
    place = where(hit.file, hit.line)
    inside = f" in '{module}'" if module else ""
    message = f"`{hit.op}` at {place}{inside}: {p.text}."
    if born is not None and p.kind in ("absorbed", "overflow"):
        message += f" The {_short(p.dtype)} operand was made at {where(born.file, born.line)}."
    elif born is not None and p.kind == "positions":
        message += f" The dtype is that of a tensor made {_short(p.dtype)} at {where(born.file, born.line)}."
    evidence = []
    if hit.caller[0]:
        chosen = where(*hit.caller)
        message += f" The dtype was passed in by the call at {chosen}."
        evidence.append(Evidence(text=f"dtype {_short(p.dtype)} chosen by the caller at {chosen}"))
    data: dict[str, Any] = {
        "phase": "forward",
        "kind": p.kind,
        "op": {"op": hit.op, "file": hit.file, "line": hit.line},
    }
    if p.value is not None:
        data["value"] = p.value
    if p.rounded is not None:
        data["rounded"] = p.rounded
    if p.share is not None:
        data["absorbed_share"] = p.share
    if hit.caller[0]:
        data["dtype_from"] = {"file": hit.caller[0], "line": hit.caller[1]}
    return catalog.finding(
        code,
        ctx,
        names,
        severity=Severity(severity),
        cause=cause,
        message=message,
        location=Location(module=module, op=hit.op, file=hit.file, line=hit.line),
        operands=operands,
        evidence=evidence,
        data=data,
    )
