"""Updates that round away: low-precision parameters an optimizer steps, and buffers a module updates
in place (running statistics), that do not move although they are being updated.

A bfloat16 weight of size 1 has a spacing of 2**-7; an AdamW step of 1e-4 or a momentum update of a
running mean near its value is below half of it and rounds back to the old value, silently. Seen
from the values alone, no float32 re-run needed:

- an optimizer step (torch's global step pre/post hooks, the first `STEPS` steps of each optimizer):
  the share of the elements whose gradient is non-zero and whose value did not change;
- a module's forward in training mode that updates its state (a buffer of it changes): the share of
  a low-precision buffer's elements left unchanged, for a buffer seen changing before, whose elements
  that did change moved by a few units in the last place at most (a rounding, not a new value).

The finding's root is where those tensors got their dtype (the model-wide cast, the load with
`assign=True`, the per-parameter cast loop: their dtype birth), and its fix keeps them float32 there
(`numerics.kept_births`). float16 parameters trained with no float32 master copy are
`optimizer_steps`' finding already; this one covers what it does not (bfloat16, buffers).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from .. import catalog
from ..catalog.family_codes import FINITE_BUT_WRONG
from ..numerics import kept_births
from ..numerics.frames import place, user_line, where
from ..numerics.opchecks import ABSORBED_SHARE, ulp
from ..remedies.places import BIRTH
from ..report import Finding, Location, Operand, Severity
from .provenance import Tag, tag_to_origin
from .provenance import where as frame_where

STEPS = 3  # optimizer steps checked per optimizer
FROZEN_SHARE = 0.9  # of a parameter's elements with a non-zero gradient, the share left unchanged
MAX_ELEMENTS = 1 << 26  # copied per step at most (the rest is not checked)
CALLS_FIRST = 4  # a module's forwards checked every time, then one in CALLS_EVERY
CALLS_EVERY = 8
MOVED_ULPS = 4  # a changed element moved by at most this many units in the last place: a rounding
# the state of optimizers whose step is about lr whatever the gradient's size (Adam, RMSprop, Adagrad,
# Adamax, Adadelta, Lion): a weight they leave unchanged is the dtype's doing. An SGD step is lr x grad:
# a small gradient moves a float32 weight little too, so its frozen weights are told (info), not blamed.
_NORMALISED = ("exp_avg_sq", "square_avg", "sum", "exp_inf", "acc_delta", "exp_avg")
_DTYPES = (torch.bfloat16,)  # float16 trained parameters: optimizer_steps' finding
_LOW = (torch.float16, torch.bfloat16)
_MANTISSA = {torch.float16: 10, torch.bfloat16: 7}
SHOWN = 3

_CAUSE = (
    "The tensor is updated in a low dtype: each update (an optimizer step, a running statistic's "
    "momentum update) is below half the dtype's spacing at the value's size and is rounded away, "
    "so the weights or statistics stop moving without any error or NaN."
)


def _name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _lr(group: dict) -> float:
    lr = group.get("lr", 1.0)
    try:
        return float(lr)
    except (TypeError, ValueError):
        return 1.0


def _snapshot(optimizer: torch.optim.Optimizer) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Copies of the low-precision parameters the step is about to update."""
    saved: list[tuple[torch.Tensor, torch.Tensor]] = []
    budget = MAX_ELEMENTS
    for group in optimizer.param_groups:
        if _lr(group) <= 0:
            continue
        for p in group["params"]:
            if p.dtype not in _DTYPES or p.grad is None or not p.requires_grad or p.numel() > budget:
                continue
            budget -= p.numel()
            saved.append((p, p.detach().clone()))
    return saved


@torch.no_grad()
def unchanged_share(before: torch.Tensor, after: torch.Tensor, updated: torch.Tensor) -> float | None:
    """The share of the `updated` elements whose value is the same in `after` as in `before`."""
    n = int(updated.sum())
    if not n:
        return None
    return int((updated & (after == before)).sum()) / n


@torch.no_grad()
def rounded_moves(before: torch.Tensor, after: torch.Tensor) -> bool:
    """The elements that changed moved by MOVED_ULPS units in the last place at most."""
    changed = after != before
    if not bool(changed.any()):
        return True
    old = before[changed].float().abs()
    step = (after[changed].float() - before[changed].float()).abs()
    spacing = torch.exp2(torch.floor(torch.log2(old.clamp_min(torch.finfo(before.dtype).tiny))))
    return bool((step <= MOVED_ULPS * spacing * 2.0 ** -_MANTISSA[before.dtype]).all())


def dtype_birth(prov: Any, t: torch.Tensor) -> tuple[str | None, int | None]:
    """The user's line where `t` got its current dtype (its birth's frame: a cast, a load, a
    registration), its file absolute; (None, None) when the watch did not see it."""
    tag = prov.lookup(t)
    if tag is None or tag.dtype != t.dtype:
        return None, None
    file, line, _ = frame_where(tag.user or tag.frame)
    return (os.path.abspath(file), line) if file else (None, None)


class RoundedUpdates:
    """The hooks' state for one session; `remove()` takes the hooks away."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self._steps: dict[int, int] = {}  # id(optimizer) -> steps checked
        self._saved: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}
        self._calls: dict[int, int] = {}  # id(module) -> forwards seen in training mode
        self._buffers: dict[int, list[tuple[str, torch.Tensor, torch.Tensor]]] = {}
        self._moving: set[int] = set()  # id(buffer) seen changing
        self._reported: set[int] = set()
        self._handles = [
            register_optimizer_step_pre_hook(self._before_step),
            register_optimizer_step_post_hook(self._after_step),
            register_module_forward_pre_hook(self._before_forward),
            register_module_forward_hook(self._after_forward, always_call=True),
        ]

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()

    # -- optimizer steps ------------------------------------------------------------------------
    def _before_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        key = id(optimizer)
        if key in self._reported or self._steps.get(key, 0) >= STEPS:
            return
        try:
            self._steps[key] = self._steps.get(key, 0) + 1
            self._saved[key] = _snapshot(optimizer)
        except Exception as exc:  # the tool never breaks the user's training step
            self.session.internal_error(exc)

    def _after_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        saved = self._saved.pop(id(optimizer), None)
        if not saved:
            return
        try:
            frozen = []
            with torch.no_grad():
                for p, before in saved:
                    if p.grad is None or p.shape != before.shape or p.dtype != before.dtype:
                        continue
                    share = unchanged_share(before, p.detach(), p.grad != 0)
                    if share is not None and share >= FROZEN_SHARE:
                        frozen.append((p, share, float(before.float().abs().max())))
            if frozen:
                self._reported.add(id(optimizer))
                total = sum(len(g["params"]) for g in optimizer.param_groups)
                state = optimizer.state.get(frozen[0][0], {})
                normalised = any(k in state for k in _NORMALISED)
                finding = self._step_finding(type(optimizer).__name__, frozen, total)
                if not normalised:
                    finding.severity = Severity.INFO
                self.session.report.add(finding)
        except Exception as exc:
            self.session.internal_error(exc)

    # -- buffers updated in place -----------------------------------------------------------------
    def _before_forward(self, module: nn.Module, args: Any) -> None:
        if not module.training or id(module) in self._reported:
            return
        low = [(n, b) for n, b in module._buffers.items() if b is not None and b.dtype in _LOW]
        if not low:
            return
        n = self._calls.get(id(module), 0)
        self._calls[id(module)] = n + 1
        if n >= CALLS_FIRST and n % CALLS_EVERY:
            return
        try:
            self._buffers[id(module)] = [
                (name, b, b.detach().clone()) for name, b in module._buffers.items() if b is not None
            ]
        except Exception as exc:
            self.session.internal_error(exc)

    def _after_forward(self, module: nn.Module, args: Any, output: Any) -> None:
        saved = self._buffers.pop(id(module), None) if self._buffers else None
        if not saved:
            return
        try:
            self._compare(module, saved)
        except Exception as exc:
            self.session.internal_error(exc)

    @torch.no_grad()
    def _compare(self, module: nn.Module, saved: list[tuple[str, torch.Tensor, torch.Tensor]]) -> None:
        current = [(name, module._buffers.get(name), before) for name, _, before in saved]
        same = [
            (n, b, s) for n, b, s in current if b is not None and b.shape == s.shape and b.dtype == s.dtype
        ]
        updated = any(not torch.equal(b, s) for _, b, s in same)
        if not updated:  # the forward did not update the module's state (eval-like, or no state)
            return
        stalled = []
        for name, b, before in same:
            if b.dtype not in _LOW or not b.numel():
                continue
            if not rounded_moves(before, b):  # a real move: this buffer is updated by the forward
                self._moving.add(id(b))
                continue
            if id(b) not in self._moving:
                continue
            share = unchanged_share(before, b, torch.ones_like(b, dtype=torch.bool))
            if share is not None and share >= ABSORBED_SHARE:
                stalled.append((name, b, share, float(before.float().abs().max())))
        if stalled:
            self._reported.add(id(module))
            self.session.report.add(self._buffer_finding(module, stalled))

    # -- findings -------------------------------------------------------------------------------
    def _tag(self, t: torch.Tensor) -> Tag | None:
        tag = self.session.prov.lookup(t)
        return tag if tag is not None and tag.dtype == t.dtype else None

    def _born(self, t: torch.Tensor) -> tuple[str | None, int | None]:
        return dtype_birth(self.session.prov, t)

    def _operand(self, qual: str, t: torch.Tensor, role: str) -> Operand:
        tag = self._tag(t)
        origin = tag_to_origin(tag, self.session.names.module) if tag is not None else None
        return Operand(role=role, dtype=_name(t.dtype), shape=list(t.shape), name=qual, origin=origin)

    def _qual(self, t: torch.Tensor, fallback: str) -> tuple[str, str | None]:
        """(the tensor's path in the model, its module's path)."""
        known = self.session.names.tensor(t)
        if known is None:
            return fallback, None
        return known[1], self.session.names.module(known[2])

    def _finding(
        self,
        message: str,
        op: str,
        module: str | None,
        operands: list[Operand],
        born: tuple[str | None, int | None],
        born_fix: str | None,
        dtype: torch.dtype,
        data: dict[str, Any],
    ) -> Finding:
        file, line = user_line()
        ctx = {"op-level", "op-absorbed"}
        names: dict[str, Any] = {"op": op, "dtype_name": _name(dtype), "receiver": operands[0].name}
        if born[0] and born[1]:
            message += f" They were made {_name(dtype)} at {where(*born)}."
            names["born"] = where(*born)
            at = place(*born)
            if at is not None:
                names["places"] = {BIRTH: at}
            if born_fix:
                names["born_fix"] = born_fix
                ctx.add("op-born-fix")
        return catalog.finding(
            FINITE_BUT_WRONG,
            ctx,
            names,
            severity=Severity.ERROR,
            cause=_CAUSE,
            message=message,
            location=Location(module=module, op=op, file=file, line=line),
            operands=operands,
            data={"phase": "update", "kind": "absorbed", **data},
        )

    def _step_finding(self, optimizer: str, frozen: list, total: int) -> Finding:
        named = [
            (*self._qual(p, f"param {i}"), p, share, scale) for i, (p, share, scale) in enumerate(frozen)
        ]
        qual, module, p, share, scale = named[0]
        dtype = p.dtype
        shown = ", ".join(q for q, *_ in named[:SHOWN]) + (", ..." if len(named) > SHOWN else "")
        message = (
            f"{optimizer}.step: {len(frozen)} of {total} trained parameters stay unchanged in {_name(dtype)} "
            f"although their gradients are non-zero ({shown}): {share:.0%} of the elements of '{qual}' "
            f"did not move, each update below half of {_name(dtype)}'s spacing at the weight's size "
            f"(up to {scale:.3g}, spacing {ulp(scale, dtype):.3g})."
        )
        born = self._born(p)
        return self._finding(
            message,
            f"{optimizer}.step",
            module,
            [self._operand(q, t, "parameter") for q, _, t, _, _ in named[:SHOWN]],
            born,
            kept_births.trainable_fp32(*born),
            dtype,
            {"absorbed_share": share, "parameters": [q for q, *_ in named]},
        )

    def _buffer_finding(self, module: nn.Module, stalled: list) -> Finding:
        name, b, share, scale = stalled[0]
        path = self.session.names.module(module)
        dtype = b.dtype
        kind = type(module).__name__
        shown = ", ".join(n for n, *_ in stalled)
        message = (
            f"{kind}.forward{f' in {path!r}' if path else ''} updates its {_name(dtype)} buffers ({shown}) "
            f"in place, and {share:.0%} of '{name}' stays unchanged: each update is below half of "
            f"{_name(dtype)}'s spacing at the value's size (up to {scale:.3g}, spacing "
            f"{ulp(scale, dtype) if math.isfinite(scale) else 0:.3g})."
        )
        born = self._born(b)
        fix = kept_births.state_fp32(*born, path or "", _name(dtype)) if path else None
        return self._finding(
            message,
            f"{kind}.forward",
            path,
            [self._operand(f"{path}.{n}" if path else n, t, "buffer") for n, t, _, _ in stalled[:SHOWN]],
            born,
            fix,
            dtype,
            {"absorbed_share": share, "buffers": [n for n, *_ in stalled]},
        )


def watch_rounded_updates(session: Any) -> Callable[[], None]:
    """Look for updates that round away while `session` runs; returns the hooks' removal."""
    return RoundedUpdates(session).remove
