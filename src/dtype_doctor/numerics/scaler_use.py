"""GradScaler used in the wrong order or set-up, seen by patching its methods (reference-counted):

- clip_grad_norm_/clip_grad_value_ on gradients GradScaler scaled and unscale_ has not divided back
  (the clip compares a norm `scale`× too large with max_norm);
- a GradScaler around bfloat16 compute (bfloat16 has float32's range: scaling buys nothing);
- scaler.step() with no scaler.update() after it (the scale never adapts; torch raises at the
  second step of the same optimizer).

Each finding names the user's line (the first frame outside torch and dtype-doctor) and carries
the loop in the right order. Nothing here syncs with the device except when a finding is written.
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch

from .. import catalog
from ..catalog.family_codes import GRAD_SCALER_MISUSE
from ..remedies.places import LOSS
from ..report import Finding, Location, Operand, Report, Severity
from . import opsource
from .frames import held_expression, place, user_frames, user_line, where

_MESSAGES = {
    "clip-before-unscale": (
        Severity.WARNING,
        "{what} ran at {at} on gradients still multiplied by GradScaler's scale ({scale}): "
        "scaler.unscale_(optimizer) had not run this step, so the clip compared norms that large with "
        "your threshold and cut every update down. Call scaler.unscale_(optimizer) before clipping "
        "(scaler.step then skips its own unscale).",
    ),
    "bf16": (
        Severity.INFO,
        "A GradScaler scales a loss computed in bfloat16 (at {at}). bfloat16 has float32's exponent "
        "range, so gradients do not underflow and scaling buys nothing: it costs an unscale pass and "
        "inf checks every step. Drop the GradScaler: loss.backward(); optimizer.step().",
    ),
    "detached-loss": (
        Severity.ERROR,
        "scaler.scale({loss}) ran at {at} on a loss with no autograd graph{made}: backward gives no "
        "parameter a gradient, so scaler.step(optimizer) finds no inf checks to read and raises "
        "'No inf checks were recorded for this optimizer'. Skip the step when there is nothing to "
        "learn from the batch, or build the zero loss from the model's output (pred.sum() * 0.0).",
    ),
    "step-without-update": (
        Severity.WARNING,
        "scaler.step(optimizer) ran at {at} with no scaler.update() after it: the scale never adapts "
        "(it neither backs off after inf/NaN gradients nor grows), and a second step() of the same "
        "optimizer raises 'step() has already been called since the last update()'. Call "
        "scaler.update() once per iteration, after every scaler.step().",
    ),
}


@dataclass
class _Use:
    ref: weakref.ref
    scaled: bool = False  # scale() ran since the last update()
    unscaled: set[int] = field(default_factory=set)  # ids of parameters unscale_ divided back
    stepped_at: tuple[str | None, int | None] | None = None  # step() since the last update()
    scaled_at: tuple[str | None, int | None] = (None, None)
    update_at: tuple[str | None, int | None] = (None, None)


class ScalerUse:
    """Watch the order of GradScaler calls; findings go to `report` (each kind once per scaler)."""

    def __init__(
        self, report: Report, only: Any = None, low_dtypes: Any = None, origin_of: Any = None
    ) -> None:
        self.report = report
        self.origin_of = origin_of  # tensor → where it was made (the watch's lineage), or None
        self.only = only
        self.low_dtypes = low_dtypes  # callable → set of low-precision dtypes the model computed in
        self._uses: dict[int, _Use] = {}
        self._said: set[tuple[int, str]] = set()
        self._undo: list[Any] = []

    # -- patches ----------------------------------------------------------------------------
    def start(self) -> ScalerUse:
        from ..patches import patch_method

        cls = torch.amp.GradScaler
        self._undo = [
            patch_method(cls, "scale", self._scale),
            patch_method(cls, "unscale_", self._unscale),
            patch_method(cls, "step", self._step),
            patch_method(cls, "update", self._update),
        ]
        for module in (torch.nn.utils, torch.nn.utils.clip_grad):
            for name in ("clip_grad_norm_", "clip_grad_value_"):
                if callable(module.__dict__.get(name)):
                    self._undo.append(_wrap_function(module, name, self._clip(name)))
        return self

    def stop(self) -> None:
        for undo in self._undo:
            undo()
        self._undo.clear()
        for key, use in self._uses.items():
            scaler = use.ref()
            if scaler is not None and use.stepped_at is not None and use.update_at == (None, None):
                self._step_without_update(key, use)

    def _use(self, scaler: Any) -> _Use | None:
        if (self.only is not None and scaler is not self.only) or not scaler.is_enabled():
            return None
        use = self._uses.get(id(scaler))
        if use is None or use.ref() is not scaler:
            use = self._uses[id(scaler)] = _Use(weakref.ref(scaler))
        return use

    def _scale(self, call_next: Any, scaler: Any, outputs: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            use = self._use(scaler)
            if use is not None:
                use.scaled, use.scaled_at = True, user_line()
                if self._bf16(outputs):
                    self._around_bf16(id(scaler), use)
                if isinstance(outputs, torch.Tensor) and outputs.grad_fn is None and outputs.is_leaf:
                    self._detached(id(scaler), use, outputs)
        except Exception:
            pass  # never break the training loop
        return call_next(scaler, outputs, *args, **kwargs)

    def _unscale(self, call_next: Any, scaler: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        result = call_next(scaler, optimizer, *args, **kwargs)
        try:
            use = self._use(scaler)
            if use is not None:
                use.unscaled |= {id(p) for g in optimizer.param_groups for p in g["params"]}
        except Exception:
            pass
        return result

    def _step(self, call_next: Any, scaler: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            use = self._use(scaler)
            if use is not None:
                if use.stepped_at is not None and use.stepped_at == user_line():
                    self._step_without_update(id(scaler), use)  # torch raises just below
                use.stepped_at = user_line()
        except Exception:
            pass
        return call_next(scaler, optimizer, *args, **kwargs)

    def _update(self, call_next: Any, scaler: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            use = self._use(scaler)
            if use is not None:
                use.scaled, use.stepped_at, use.update_at = False, None, user_line()
                use.unscaled.clear()
        except Exception:
            pass
        return call_next(scaler, *args, **kwargs)

    def _clip(self, name: str) -> Any:
        def before(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
            """Check the parameters about to be clipped; a generator is read once: pass a list on."""
            if args:
                parameters, rest = args[0], args[1:]
            elif "parameters" in kwargs:
                parameters, rest = kwargs.pop("parameters"), ()
            else:
                return args, kwargs
            if not isinstance(parameters, torch.Tensor):
                parameters = list(parameters)
            with contextlib.suppress(Exception):  # never break the training loop
                self._check_clip(name, parameters)
            return (parameters, *rest), kwargs

        return before

    # -- the checks -------------------------------------------------------------------------
    def _bf16(self, outputs: Any) -> bool:
        seen = set(self.low_dtypes()) if self.low_dtypes is not None else set()
        if isinstance(outputs, torch.Tensor):
            seen.add(outputs.dtype) if outputs.dtype in (torch.float16, torch.bfloat16) else None
            device = outputs.device.type
            if torch.is_autocast_enabled(device):
                seen.add(torch.get_autocast_dtype(device))
        return torch.bfloat16 in seen and torch.float16 not in seen

    def _check_clip(self, name: str, parameters: Any) -> None:
        params = [parameters] if isinstance(parameters, torch.Tensor) else parameters
        ids = {id(p) for p in params if getattr(p, "grad", None) is not None}
        for key, use in self._uses.items():
            scaler = use.ref()
            if scaler is None or not use.scaled or not ids or ids <= use.unscaled:
                continue
            file, line = user_line()
            self._say(
                key,
                "clip-before-unscale",
                (file, line),
                op=name,
                what=name,
                scale=f"{scaler.get_scale():g}",
                **user_names(scaler, ids),
            )

    def _around_bf16(self, key: int, use: _Use) -> None:
        self._say(key, "bf16", use.scaled_at, op="GradScaler.scale")

    def _detached(self, key: int, use: _Use, loss: torch.Tensor) -> None:
        """A leaf loss (made, not computed from the parameters): nothing to backpropagate."""
        origin = self.origin_of(loss) if self.origin_of is not None else None
        made = f" (a leaf tensor made at {where(origin.file, origin.line)})" if origin and origin.file else ""
        name = opsource.call_argument(*use.scaled_at, "scale") or "loss"
        self._say(
            key, "detached-loss", use.scaled_at, op="GradScaler.scale", loss=name, made=made, origin=origin
        )

    def _step_without_update(self, key: int, use: _Use) -> None:
        self._say(key, "step-without-update", use.stepped_at or (None, None), op="GradScaler.step")

    def _say(
        self,
        key: int,
        kind: str,
        at: tuple[str | None, int | None],
        op: str,
        origin: Any = None,
        **names: str,
    ) -> None:
        if (key, kind) in self._said:
            return
        self._said.add((key, kind))
        severity, text = _MESSAGES[kind]
        use = self._uses.get(key)
        scaler = use.ref() if use is not None else None
        if scaler is not None and "scaler" not in names:  # the loop's fixes in the user's names
            names = {**user_names(scaler), **names}
        message = text.format(at=where(*at), **names)
        finding = misuse_finding(kind, message, at[0], at[1], severity, op, names)
        if origin is not None:
            finding.operands.append(Operand(role="loss", origin=origin))
        self.report.add(finding)


def user_names(scaler: Any, params: set[int] | None = None) -> dict[str, str]:
    """The user's names for `scaler` and for the optimizer that trains any of `params` (ids; None:
    any optimizer): the variables (or attributes: `self.scaler`) their frames hold them in; a name
    not found is left out."""
    frames = user_frames()
    out: dict[str, str] = {}
    held = held_expression(lambda v: v is scaler, frames)
    if held is not None:
        out["scaler"] = held[0]

    def trains(value: Any) -> bool:
        groups = value.param_groups if isinstance(value, torch.optim.Optimizer) else ()
        return any(params is None or id(p) in params for g in groups for p in g["params"])

    held = held_expression(trains, frames)
    if held is not None:
        out["optimizer"] = held[0]
    return out


def misuse_finding(
    kind: str,
    message: str,
    file: str | None,
    line: int | None,
    severity: Severity,
    op: str,
    names: dict[str, str] | None = None,
) -> Finding:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    at = place(file, line)  # the scaler call: its loop's fixes (a skip, the call order) go there
    return catalog.finding(
        GRAD_SCALER_MISUSE,
        {kind},
        names={"device": device, **(names or {}), "places": {LOSS: at} if at else None},
        severity=severity,
        message=message,
        location=Location(op=op, file=file, line=line),
        data={"misuse": kind},
    )


def _wrap_function(module: Any, name: str, before: Any) -> Any:
    """Wrap `module.name` so that `before(args, kwargs)` sees (and may rebuild) its arguments;
    returns the undo. Undone out of order (someone wrapped on top), the wrapper stays and passes
    straight through."""
    original = module.__dict__[name]
    active = [True]

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if active[0]:
            args, kwargs = before(args, kwargs)
        return original(*args, **kwargs)

    setattr(module, name, wrapper)

    def undo() -> None:
        active[0] = False
        if module.__dict__.get(name) is wrapper:
            setattr(module, name, original)

    return undo
