"""An overflow born at a module-wide cast: the module that overflows kept in float32 through it.

A float16 overflow inside a model that one line converted (`model.to(torch.float16)`, `.half()`) was
decided at that line: the module computes in float16 because the cast made it so. The fix keeps the
smallest module around the overflow whose float32 run is finite in float32 through that cast
(`keep_in_fp32(model, [path])` pasted before it). "Smallest" is found by trying: the user's last call
of the model is replayed in a forked child with each enclosing module kept, from the overflowing one
outwards (a module whose float32 output is still too large for float16 when cast back fails, and its
parent is tried), and the first whose outputs are all finite is the fix, labelled with what that
replay measured against float32.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import torch
from torch import nn

from .. import remedies
from ..catalog.numerics import KEEP_OVERFLOW_THROUGH_CAST
from ..numerics import opsource
from ..numerics.frames import place, where
from ..remedies.places import BIRTH
from ..repair.keep import keep_in_fp32
from ..report import Finding
from ..tensors import map_tensors
from ..tracing.casts import MODULE_LOWERING
from ..verifying import isolation
from ..verifying.contract import THRESHOLD
from . import upcast_flags
from .verify import Call, floats_in, max_relative_error, reference

CODES = ("fp16-overflow", "nonfinite-values")
_TRIED = 6  # enclosing modules tried at most


def _run(call: Call) -> list[torch.Tensor]:
    with contextlib.ExitStack() as stack:
        for device, dtype in call.autocast:
            stack.enter_context(torch.autocast(device, dtype=dtype))
        stack.enter_context(torch.no_grad())
        args, kwargs = map_tensors((call.args, call.kwargs), lambda t: t.clone())
        return floats_in(getattr(call.module, call.method)(*args, **kwargs))


def candidates(owner: nn.Module, ancestors: list[tuple[str, nn.Module]]) -> list[str]:
    """The paths in `owner` of the modules around the overflow, innermost first: those with a forward
    of their own (a ModuleList has none), never the whole model."""
    paths = {id(m): n for n, m in owner.named_modules()}
    out = [
        paths[id(m)] for _, m in ancestors if paths.get(id(m)) and type(m).forward is not nn.Module.forward
    ]
    return out[:_TRIED]


def smallest_finite(call: Call, paths: list[str]) -> tuple[str, float | None] | None:
    """(the first path whose float32 run makes the call's outputs finite, its error vs float32); runs
    in the forked child, where the model may change freely."""
    ref = reference(call)
    for path in paths:
        with keep_in_fp32(call.module, [path]):
            try:
                got = _run(call)
            except Exception:
                continue
        if got and all(bool(torch.isfinite(t).all()) for t in got):
            err = max_relative_error([t.float() for t in got], ref) if ref is not None else None
            return path, err
    return None


def attach(session: Any) -> None:
    """Put the verified keep-through-the-cast fix first on each overflow finding whose module's low
    dtype a module-wide cast in the user's code gave (`computed_in`'s `dtype_birth`)."""
    calls = [Call(*c) for c in session.calls.values()]
    if not calls or not isolation.can_fork():
        return
    for f in session.report.findings:
        born, loc = f.data.get("dtype_birth"), f.location
        if f.code not in CODES or not born or loc is None or not loc.module:
            continue
        notice = getattr(session, "forks", None)  # the tool's own fork is not the program's
        forks = getattr(notice, "forks", 0)
        try:
            _attach_one(f, born, session.names.ancestors(loc.module), calls)
        finally:
            if notice is not None:
                notice.forks = forks


def _attach_one(f: Finding, born: dict, ancestors: list, calls: list[Call]) -> None:
    inner = ancestors[0][1] if ancestors else None
    call = next((c for c in reversed(calls) if any(m is inner for m in c.module.modules())), None)
    file, line = born.get("file"), born.get("line")
    if call is None or not file or not line:
        return
    full = file if os.path.isabs(file) else os.path.abspath(file)
    model = next((r for op in sorted(MODULE_LOWERING) if (r := opsource.receiver(full, line, op))), None)
    paths = candidates(call.module, ancestors)
    if model is None or not paths:
        return
    upcast_flags.attach(f, ancestors, call, file, _run)
    outcome = isolation.in_child(lambda: smallest_finite(call, paths))
    if not outcome.value:
        return
    kept, err = outcome.value
    dtype = next((o.dtype for o in f.operands if o.dtype in ("float16", "bfloat16")), "float16")
    fix = remedies.make(
        KEEP_OVERFLOW_THROUGH_CAST,
        places={BIRTH: place(file, line)},
        kept=kept,
        kept_list=repr([kept]),
        model=model,
        born=where(file, line),
        dtype_name=dtype,
    )
    if fix is None:
        return
    shown = f", max rel. error {err:.0e} vs fp32" if err is not None else ""
    fix.verified = err is None or err <= THRESHOLD
    fix.verification = f"verified: re-run of your call with it kept: every output finite{shown}"
    f.fixes.insert(0, fix)
