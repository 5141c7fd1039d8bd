"""GradScaler health: skipped steps, a collapsing scale, unbounded growth.

A skipped step is told from the scale: `update()` lowers it (by backoff_factor) exactly when the
step found inf/NaN gradients, so comparing get_scale() before and after each update() needs no
private state (the same test the transformers Trainer uses).
"""

from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch

from .. import catalog
from ..catalog.family_codes import GRAD_SCALER_COLLAPSE, GRAD_SCALER_GROWTH, GRAD_SCALER_OVERFLOW
from ..report import Evidence, Finding, Location, Report, Severity
from .frames import user_line
from .scaler_use import ScalerUse, misuse_finding
from .stats import fmt

GROWTH_LIMIT = 2.0**24


@dataclass
class ScalerHistory:
    """Scale before and after every update() of one GradScaler; index = optimizer step number."""

    name: str
    init_scale: float
    scales: list[tuple[float, float]] = field(default_factory=list)
    update_at: tuple[str | None, int | None] = (None, None)  # the user's line calling update()

    @property
    def skipped(self) -> list[int]:
        return [i for i, (before, after) in enumerate(self.scales) if after < before]


class ScalerMonitor:
    """Record a GradScaler's scale around each update() and report its health.

    With `scaler=None` every GradScaler used while started is watched (the class is patched,
    and restored by stop()); with a scaler, only that instance.
    """

    def __init__(
        self, scaler: Any = None, report: Report | None = None, low_dtypes: Any = None, origin_of: Any = None
    ) -> None:
        self.report = report if report is not None else Report(tool="numerics")
        self.scaler = scaler
        self.use = ScalerUse(self.report, only=scaler, low_dtypes=low_dtypes, origin_of=origin_of)
        self.histories: dict[int, ScalerHistory] = {}
        self._refs: dict[int, weakref.ref] = {}
        self._restore: Any = None
        self._reported = False

    def start(self) -> ScalerMonitor:
        if self._restore is not None:
            return self
        self.use.start()
        if self.scaler is not None:
            target, original = self.scaler, self.scaler.update  # bound method

            @functools.wraps(type(self.scaler).update)
            def update(new_scale: Any = None) -> None:
                self._around(target, original, new_scale)

            self.scaler.update = update
            self._restore = lambda: self.scaler.__dict__.pop("update", None)
        else:
            from ..patches import patch_method

            def patched_update(call_next: Any, scaler: Any, new_scale: Any = None) -> None:
                self._around(scaler, functools.partial(call_next, scaler), new_scale)

            # reference-counted: monitors stopped out of order never leave the class patched
            self._restore = patch_method(torch.amp.GradScaler, "update", patched_update)
        return self

    def stop(self) -> Report:
        if self._restore is not None:
            self._restore()
            self._restore = None
            self.use.stop()
        if not self._reported:
            self._reported = True
            for history in self.histories.values():
                for finding in findings_for(history):
                    self.report.add(finding)
        return self.report

    def __enter__(self) -> ScalerMonitor:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _around(self, scaler: Any, original: Any, new_scale: Any) -> None:
        if not scaler.is_enabled():
            original(new_scale)
            return
        before = scaler.get_scale()
        original(new_scale)
        try:
            after = scaler.get_scale()
            history = self.histories.get(id(scaler))
            if history is None or self._refs[id(scaler)]() is not scaler:
                name = f"GradScaler #{len(self.histories)}" if self.histories else "GradScaler"
                history = ScalerHistory(name, float(scaler._init_scale))
                self.histories[id(scaler)] = history
                self._refs[id(scaler)] = weakref.ref(scaler)
            history.scales.append((float(before), float(after)))
            history.update_at = user_line()
        except Exception:  # never break the user's training loop
            pass


def watch_scaler(scaler: Any, report: Report | None = None) -> ScalerMonitor:
    """Start watching one GradScaler; call `.stop()` (or use `with`) to get its findings."""
    return ScalerMonitor(scaler, report).start()


def _steps(steps: list[int], limit: int = 12) -> str:
    text = ", ".join(map(str, steps[:limit]))
    return text + (f" ... ({len(steps)} in all)" if len(steps) > limit else "")


def findings_for(h: ScalerHistory) -> list[Finding]:
    out: list[Finding] = []
    if not h.scales:
        return out
    n = len(h.scales)
    skipped = h.skipped
    scales = [a for _, a in h.scales]
    first, last = h.scales[0][0], scales[-1]
    trail = " → ".join(fmt(s) for s in [first, *scales][-8:])
    if skipped:
        # skips that only walk the initial scale down to a fitting one are calibration, not trouble
        calibrating = skipped == list(range(len(skipped))) and len(skipped) < n
        severity = (
            Severity.INFO if calibrating else Severity.ERROR if len(skipped) * 2 > n else Severity.WARNING
        )
        message = (
            f"{h.name} skipped {len(skipped)} of {n} optimizer step(s) (steps {_steps(skipped)}, counting "
            f"update() calls from 0): their gradients held inf/NaN, so optimizer.step() did not run and the "
            f"scale was multiplied by the backoff factor each time (scale {trail})."
        )
        evidence = [
            Evidence(
                text=f"scale before/after update() at step {i}: {fmt(h.scales[i][0])} → {fmt(h.scales[i][1])}"
            )
            for i in skipped[:12]
        ]
        if skipped[0] == 0:
            message += (
                " Because the very first step was skipped, optimizer.step() had not run when "
                "lr_scheduler.step() was called, which is why PyTorch warned 'Detected call of "
                "`lr_scheduler.step()` before `optimizer.step()`': harmless here, the scheduler is one "
                "step ahead; step the scheduler only when the scale did not drop to silence it."
            )
            evidence.append(
                Evidence(
                    text="skip-aware scheduler: scale = scaler.get_scale(); scaler.update(); "
                    "if scaler.get_scale() >= scale: lr_scheduler.step()"
                )
            )
        if calibrating:
            message += (
                " Skips only at the start, while the scale comes down from its initial value, are normal."
            )
        if n >= 3 and len(skipped) == n:
            out.append(_falls_every_step(h, n, trail))
        out.append(
            catalog.finding(
                GRAD_SCALER_OVERFLOW,
                severity=severity,
                message=message,
                location=Location(op="GradScaler.update", step=skipped[0]),
                evidence=evidence,
                data={
                    "skipped_steps": skipped,
                    "steps": n,
                    "scales": scales[-50:],
                    "init_scale": h.init_scale,
                },
            )
        )
    low = min(scales)
    if low < 1:
        at = next(i for i, s in enumerate(scales) if s < 1)
        out.append(
            catalog.finding(
                GRAD_SCALER_COLLAPSE,
                message=(
                    f"{h.name}'s scale fell below 1 at step {at} (from {fmt(h.init_scale)}) and reached "
                    f"{fmt(low)}: {len(skipped)} of {n} steps were skipped."
                ),
                location=Location(op="GradScaler.update", step=at),
                data={"min_scale": low, "skipped_steps": skipped},
            )
        )
    if last > GROWTH_LIMIT and len(scales) > 1 and last > scales[0] and last >= max(scales):
        out.append(
            catalog.finding(
                GRAD_SCALER_GROWTH,
                message=(
                    f"{h.name}'s scale grew to {fmt(last)} (> 2**24) and is still growing after {n} steps: "
                    "no gradient has overflowed for a long time."
                ),
                location=Location(op="GradScaler.update", step=n - 1),
                data={"scale": last},
            )
        )
    return out


def _falls_every_step(h: ScalerHistory, n: int, trail: str) -> Any:
    file, line = h.update_at
    message = (
        f"{h.name}'s scale fell at every one of its {n} update() calls (scale {trail}): every step had "
        "inf/NaN gradients, so optimizer.step() never ran and the model is not training. Scaling does "
        "not cause this: find what overflows (a forward already inf/NaN, a loss computed in float16 "
        "and multiplied by the scale, a layer that overflows in backward), keep that in float32 or train "
        "in bfloat16, and keep the loop in the order below."
    )
    return misuse_finding("scale-falls-every-step", message, file, line, Severity.ERROR, "GradScaler.update")
