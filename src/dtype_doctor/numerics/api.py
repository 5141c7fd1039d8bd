"""Run a model for n steps under the numerics monitor: the API behind `dtype-doctor numerics`.

>>> result = run_numerics(model, inputs=(x,), dtype=torch.float16, steps=2)
>>> result.report.codes()
['finite-but-wrong']

It casts the model (after materialising lazy modules on float32 inputs), runs forward (and with
`train`, backward on the mean of the outputs), gives every op-level scan its extra call, then
measures each keep-in-float32 fix it emits by re-running the whole model with the fix applied
against a float32 copy, and with `find_fp32` searches the smallest such set for a finite forward.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .. import remedies
from ..catalog.shared_remedies import KEEP_SEARCHED
from ..errors import DoctorError
from ..report import Finding, Report
from ..tensors import cast_floats
from .monitor import NumericsMonitor
from .opscan import rel_l2
from .stats import measured_tensors


@dataclass
class NumericsRun:
    report: Report
    monitor: NumericsMonitor
    keep_fp32: list[str] | None = None  # find_fp32's set (None: not searched)
    keep_fp32_verified: bool | None = None


def run_numerics(
    model: nn.Module,
    inputs: Sequence[Any] = (),
    kw_inputs: Mapping[str, Any] | None = None,
    *,
    dtype: torch.dtype | None = None,
    steps: int = 2,
    every: int = 1,
    train: bool = False,
    find_fp32: bool = False,
    report: Report | None = None,
) -> NumericsRun:
    """Run `model(*inputs, **kw_inputs)` `steps` times under a NumericsMonitor; findings in `.report`.

    dtype: cast the model to it first (inputs are the caller's: cast them as you mean to).
    train: backward on the summed means of the outputs each step (gradients dropped after).
    find_fp32: when the forward produced inf/NaN, search and verify a keep-in-float32 set.
    DoctorError when the model raises (its message), or `train` finds no output that requires grad.
    """
    if steps < 1 or every < 1:
        raise DoctorError("steps and every must be at least 1")
    kw_inputs = dict(kw_inputs or {})
    inputs = tuple(inputs)
    _materialize(model, inputs, kw_inputs)
    if dtype is not None:
        model.to(dtype)
    model.train(train)

    def forward(m: nn.Module) -> Any:
        try:
            return m(*inputs, **kw_inputs)
        except Exception as exc:
            raise DoctorError(f"the model raised {type(exc).__name__}: {exc}") from None

    report = report if report is not None else Report(tool="numerics")
    monitor = NumericsMonitor(report=report, model=model, every=every, backward=train).start()
    try:
        for _ in range(steps):
            with torch.set_grad_enabled(train):
                out = forward(model)
                if train:
                    parts = [t.float().mean() for t in measured_tensors(out) if t.requires_grad]
                    if not parts:
                        raise DoctorError("--train: no model output requires grad")
                    torch.stack(parts).sum().backward()
                    model.zero_grad(set_to_none=True)
        with torch.no_grad():  # a module flagged at the last step: its op-level scan needs a call
            monitor.scan_call(lambda: forward(model))
    finally:
        monitor.stop()
    for finding in report.findings:
        if finding.data.get("kind") == "finite-but-wrong" and finding.data.get("keep_fp32"):
            _verify_keep(finding, model, inputs, kw_inputs)
    result = NumericsRun(report, monitor)
    if find_fp32 and any(p.phase == "forward" for p in monitor.producers):
        _find_fp32(result, model, forward)
    return result


def _materialize(model: nn.Module, inputs: tuple, kw_inputs: dict) -> None:
    """Lazy modules (LazyLinear...) get their parameters from one float32 forward, before any cast."""
    if not any(nn.parameter.is_lazy(p) for p in model.parameters()):
        return
    try:
        with torch.no_grad():
            model(*cast_floats(inputs, torch.float32), **cast_floats(kw_inputs, torch.float32))
    except Exception as exc:
        raise DoctorError(
            f"the model raised {type(exc).__name__} initialising its lazy modules: {exc}"
        ) from None


def model_error(
    model: nn.Module,
    inputs: Sequence[Any] = (),
    kw_inputs: Mapping[str, Any] | None = None,
    keep: Sequence[str] = (),
) -> float:
    """Relative L2 error of the model's outputs vs a float32 copy's on float32 inputs, with the
    modules in `keep` run in float32 (keep_in_fp32, removed afterwards)."""
    from ..repair.keep import keep_in_fp32

    kw_inputs = dict(kw_inputs or {})
    reference = copy.deepcopy(model).float()
    state = torch.get_rng_state()
    with torch.no_grad():
        ref = list(
            measured_tensors(
                reference(*cast_floats(inputs, torch.float32), **cast_floats(kw_inputs, torch.float32))
            )
        )
        torch.set_rng_state(state)
        with keep_in_fp32(model, list(keep)):
            low = list(measured_tensors(model(*inputs, **kw_inputs)))
    torch.set_rng_state(state)
    return rel_l2(low, [r.float() for r in ref])


def _verify_keep(finding: Finding, model: nn.Module, inputs: tuple, kw: dict) -> None:
    """Re-run the whole model with the emitted keep-in-float32 fix applied; put both errors in it."""
    keep = finding.data["keep_fp32"]
    try:
        before = model_error(model, inputs, kw)
        after = model_error(model, inputs, kw, keep)
    except Exception:
        return
    finding.data["model_error"] = {"before": before, "after": after}
    finding.message += (
        f" The whole model's output is {before:.3g} off float32; with {keep} kept in float32 "
        f"(re-run): {after:.2g}."
    )
    for fix in finding.fixes:
        if "keep_in_fp32" in (fix.snippet or ""):
            fix.title = (
                f"Keep {', '.join(repr(k) for k in keep)} in float32, casting at its border (re-run with "
                f"it: model error vs float32 {before:.3g} → {after:.2g})"
            )


def _find_fp32(result: NumericsRun, model: nn.Module, forward: Callable) -> None:
    from .fp32_set import find_fp32_set

    chosen, after = find_fp32_set(model, forward)
    verified = not any(
        f.data.get("phase") == "forward" and f.data.get("kind") in ("module", "inline", "input")
        for f in after.findings
    )
    result.keep_fp32, result.keep_fp32_verified = chosen, verified
    result.report.meta["keep_fp32"] = chosen
    result.report.meta["keep_fp32_verified"] = verified
    for finding in result.report.findings:
        if finding.data.get("nonfinite_params"):
            continue  # the weight overflowed on the cast: keeping the op in float32 cannot help
        if finding.data.get("phase") == "forward" and finding.data.get("kind") in ("module", "inline"):
            finding.data["keep_fp32"] = chosen
            searched = remedies.make(KEEP_SEARCHED, keep=chosen, finite=True if verified else None)
            finding.fixes = remedies.first(finding.fixes, searched)
