"""float16 parameters an optimizer updates in place, with no float32 master copy (`model.half()`
then AdamW): seen at each optimizer's first step while watching, through torch's global optimizer
step pre-hook, as the finding `audit` gives for an optimizer handed to it (optimizer-state-dtype).
The update is tiny against the weight, rounds away in float16, and Adam's state over- or underflows:
the loss stalls or `grad_norm` turns NaN with no op ever mixing dtypes."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_pre_hook

from .. import catalog
from ..catalog.family_codes import OPTIMIZER_STATE_DTYPE
from ..numerics.frames import held_expression, place, user_line
from ..remedies.places import BIRTH, assignment_of, trained_module
from ..report import Finding, Location, Operand, Origin, Severity
from .intent import asked_at
from .names import user_frames
from .provenance import short_path, tag_to_origin
from .rounded_updates import watch_rounded_updates

SHOWN = 3  # parameters named in the message


def fp16_without_master_weights(
    optimizer: torch.optim.Optimizer,
    name_of: Callable[[torch.Tensor], str | None],
    file: str | None = None,
    line: int | None = None,
    born: Callable[[torch.Tensor], tuple[str, Origin] | None] | None = None,
    names: Callable[[], Mapping[str, Any]] | None = None,
) -> Finding | None:
    """The finding for `optimizer` when it trains float16 parameters itself (None when it does not:
    fp32 parameters, or an fp32 master copy being what it holds). `name_of` gives a parameter's
    path in the model (`model.layers.0.weight`); one it cannot name is `param N`. `born` gives where
    a parameter was made float16 (`a module-wide .half() at x.py:9`) and its origin: the root.
    `names` gives the user's names for the optimizer and its model, where it was built (`user_names`)."""
    params = [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]
    half = [p for p in params if p.dtype == torch.float16]
    if not half:
        return None
    shown = [name_of(p) or f"param {i}" for i, p in enumerate(half[:SHOWN])]
    more = ", ..." if len(half) > SHOWN else ""
    birth = born(half[0]) if born is not None else None
    asked = f"; they were made float16 by {birth[0]}" if birth is not None else ""
    return catalog.finding(
        OPTIMIZER_STATE_DTYPE,
        names={"dtype": "torch.float32", "device": half[0].device.type, **(names() if names else {})},
        severity=Severity.WARNING,
        message=(
            f"{type(optimizer).__name__} updates {len(half)} of {len(params)} parameters in float16 "
            f"({', '.join(shown)}{more}) with no float32 master copy: small updates round away and "
            f"its state under- or overflows in float16{asked}"
        ),
        location=Location(op=f"{type(optimizer).__name__}.step", file=file and short_path(file), line=line),
        operands=[
            Operand(role="parameter", dtype="float16", name=shown[0], origin=birth[1] if birth else None)
        ],
    )


def user_names(optimizer: torch.optim.Optimizer, frames: list[Any]) -> dict[str, Any]:
    """The remedy's evidence in the user's own names: the variable holding `optimizer` (`opt`,
    `self.optimizer`), its class, the model that holds the parameters it trains (`model`), the dtype
    its forward computes in, and the statement that built it with the line it is at (`built`, `places`); {}
    when one is not found."""
    found = held_expression(lambda v: v is optimizer, frames)
    if found is None or not frames:
        return {}
    file, line = frames[0].f_code.co_filename, frames[0].f_lineno
    built = assignment_of(file, found[0], line)
    at = place(file, built[0]) if built is not None else None
    if built is None or at is None:
        return {}
    model = trained_module(built[1])  # as the statement names it: valid where it is pasted
    if model is None:
        trained = {id(p) for group in optimizer.param_groups for p in group["params"]}
        held = held_expression(lambda v: isinstance(v, nn.Module) and trained <= _ids(v), frames)
        model = held[0] if held is not None else None
    if model is None:
        return {}
    return {
        "compute": "float16",
        "optimizer": found[0],
        "optimizer_class": type(optimizer).__name__,
        "model": model,
        "built": built[1],
        "file": at.file,
        "line": at.line,
        "places": {BIRTH: at},
    }


def _ids(module: nn.Module) -> set[int]:
    return {id(p) for p in module.parameters()}


def _parameter_name(session: Any, param: torch.Tensor) -> str | None:
    """`param`'s path under the modules the session knows: the model it was given, or else the
    outermost modules the program called (`run`, which is given none)."""
    found = session.names.tensor(param)
    return found[1] if found is not None and found[0] == "parameter" else None


def _parameter_birth(session: Any, param: torch.Tensor) -> tuple[str, Origin] | None:
    """Where the program asked for `param`'s dtype, and its origin (None: not asked, or unknown)."""
    tag = session.prov.lookup(param)
    at = asked_at(tag)
    return (at, tag_to_origin(tag, session.names.module)) if at is not None and tag is not None else None


def watch_optimizer_steps(session: Any) -> Callable[[], None]:
    """Look at each optimizer's first step while `session` runs; returns the hook's removal."""
    seen: set[int] = set()

    def before_step(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if id(optimizer) in seen:
            return
        seen.add(id(optimizer))
        try:
            finding = fp16_without_master_weights(
                optimizer,
                partial(_parameter_name, session),
                *user_line(),
                born=partial(_parameter_birth, session),
                names=partial(user_names, optimizer, user_frames(depth=2)),
            )
            if finding is not None:
                session.report.add(finding)
        except Exception as exc:  # the tool never breaks the user's training step
            session.internal_error(exc)

    handle = register_optimizer_step_pre_hook(before_step)
    rounded = watch_rounded_updates(session)  # bfloat16 parameters and buffers whose updates round away

    def remove() -> None:
        handle.remove()
        rounded()

    return remove
