"""Repairs: one explicit dtype policy for a whole model (`fix`), and casting hooks at module borders
(`guard`).

`fix` converts in place and returns the model (like `Module.to`); `guard` never touches parameters,
only the inputs that reach a module, and is removable.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from .. import catalog
from ..catalog.family_codes import MODULE_INPUT_CAST
from ..dtypes import torch_name
from ..report import Finding, Location, Operand, Report
from ..signatures import argument_names
from ..tensors import iter_tensors, map_tensors
from .keep import cast_inputs_hook, cast_outputs_hook, needs_cast
from .keep_together import KeepNotes, widen_kept
from .policy import (
    KeepPattern,
    dtype_name,
    hf_keep_fp32,
    is_compute_float,
    kept_modules,
    own_float_dtypes,
    select,
    to_torch_dtype,
)

__all__ = ["DEFAULT_KEEP_FP32", "FixPlan", "Guard", "convert", "fix", "guard"]

log = logging.getLogger("dtype_doctor")

# Nothing is kept in float32 unless asked (`keep_fp32=("norm",)` keeps the normalisation layers) or
# the model says so itself (transformers' `_keep_in_fp32_modules`): a healthy model stays as it is.
DEFAULT_KEEP_FP32: tuple[str, ...] = ()
_FIX_ATTR = "_dtype_doctor_fix"


class FixPlan:
    """What `fix` did to a model: the dtype, the modules kept in fp32, and the border hooks."""

    def __init__(
        self, dtype: torch.dtype, kept: list[str], handles: list[RemovableHandle], notes: Sequence[str] = ()
    ) -> None:
        self.dtype = dtype
        self.kept = kept
        self.notes = list(notes)  # modules kept beyond the patterns: tied weights, quantized
        self._handles = handles

    def remove_hooks(self) -> None:
        """Remove the border casts (the parameters keep their converted dtypes)."""
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def __repr__(self) -> str:
        notes = f", notes={self.notes}" if self.notes else ""
        return f"FixPlan(dtype={self.dtype}, kept_fp32={self.kept}{notes})"


def fix(
    model: nn.Module,
    dtype: torch.dtype | str = torch.float16,
    keep_fp32: Iterable[KeepPattern] = DEFAULT_KEEP_FP32,
    *,
    cast_inputs: bool = True,
) -> nn.Module:
    """Put the whole model under one dtype policy, in place, and return it.

    Every floating parameter and buffer becomes `dtype`, except the modules matched by `keep_fp32`
    (class-name words like "norm", qualified-name regexes, or module classes; default: none) and the
    model's own `_keep_in_fp32_modules`, which become float32 on purpose. Hooks cast at the borders:
    inputs of each fp32 island to float32 and its outputs back to `dtype`, and (cast_inputs, default
    True) the floating activations that enter the model to `dtype`. An input of 0 or 1 dimensions (a
    timestep, a noise level `sigma`, a scale) is left as it is unless the model is a torch.nn layer:
    the model's own code computes with it (in float32 on purpose) and casts it where it needs to.
    A model already in `dtype` and fed `dtype` inputs runs bitwise as before. Calling `fix` again
    replaces the earlier policy; the plan is at `model._dtype_doctor_fix` (`.kept`, `.remove_hooks()`).
    """
    _require_module(model, "fix")
    target = to_torch_dtype(dtype)
    if not target.is_floating_point:
        raise ValueError(f"fix needs a floating dtype, got {target}")
    keep_fp32 = tuple(keep_fp32)
    if keep_fp32:
        select(model, keep_fp32)  # DoctorError on a pattern that matches nothing: never ignore a typo
    previous = getattr(model, _FIX_ATTR, None)
    if isinstance(previous, FixPlan):
        previous.remove_hooks()
    notes = KeepNotes()
    kept = convert(model, target, keep_fp32, notes=notes)
    for line in notes.lines():
        log.warning("dtype-doctor fix: %s", line)
    handles: list[RemovableHandle] = []
    if cast_inputs:
        handles.append(
            model.register_forward_pre_hook(cast_inputs_hook(target, _casts_all(model)), with_kwargs=True)
        )
    for _, module in kept:
        handles.append(module.register_forward_pre_hook(cast_inputs_hook(torch.float32), with_kwargs=True))
        handles.append(module.register_forward_hook(cast_outputs_hook(target)))
    object.__setattr__(model, _FIX_ATTR, FixPlan(target, [n for n, _ in kept], handles, notes.lines()))
    return model


def convert(
    model: nn.Module,
    dtype: torch.dtype | str,
    keep_fp32: Iterable[KeepPattern] = (),
    *,
    loading: bool = False,
    notes: KeepNotes | None = None,
) -> list[tuple[str, nn.Module]]:
    """Convert in place: everything to `dtype` except the kept modules (`keep_fp32` and the model's
    own `_keep_in_fp32_modules`), which become float32. No hooks. Returns the kept (name, module) pairs.

    loading=True mimics `from_pretrained(torch_dtype=dtype)`, which leaves non-persistent buffers (not
    in the checkpoint) in the dtype they were made in; otherwise every floating buffer is cast, as
    `Module.to` does."""
    target = to_torch_dtype(dtype)
    kept: list[tuple[str, nn.Module]] = []
    if target != torch.float32:
        patterns = (*keep_fp32, *(re.compile(p) for p in hf_keep_fp32(model, target)))
        kept = widen_kept(model, kept_modules(model, patterns), notes)  # + tied, quantized
    kept_ids = {id(sub) for _, m in kept for sub in m.modules()}
    with torch.no_grad():
        for module in model.modules():
            _convert_own(module, torch.float32 if id(module) in kept_ids else target, loading)
    return kept


def _convert_own(module: nn.Module, dtype: torch.dtype, loading: bool) -> None:
    """Cast the module's own floating parameters and buffers, never its children's (each tensor is
    cast once, straight to its final dtype, so fp32 islands lose no precision on the way)."""
    for p in module._parameters.values():
        if p is not None and is_compute_float(p) and p.dtype != dtype:
            p.data = p.data.to(dtype)
            if p.grad is not None:
                p.grad = p.grad.to(dtype)
    for name, b in module._buffers.items():
        if loading and name in module._non_persistent_buffers_set:
            continue  # computed at init (rotary inv_freq...): loading in a dtype leaves them as they are
        if b is not None and is_compute_float(b) and b.dtype != dtype:
            module._buffers[name] = b.to(dtype)


def _casts_all(module: nn.Module) -> bool:
    """torch.nn's own layers never cast their inputs: every floating input must be cast for them.
    Any other module's code may keep a small input (timestep, sigma) in float32 on purpose."""
    return type(module).__module__.startswith("torch.nn.")


class Guard:
    """Hooks that cast each module's floating inputs to its parameter dtype, logging each cast once.

    A torch.nn layer gets every floating input cast; any other module only its activations (2+
    dimensions): a timestep or noise level `sigma` the model's own code keeps in float32 is left
    alone (a torch.nn layer it reaches casts it there). A consistent model runs bitwise as before.

    Use as `g = guard(model) ... g.remove()` or `with guard(model) as g: ...`. `g.report` holds one
    `module-input-cast` finding per (module, input, dtype) with the number of casts.
    """

    def __init__(self, model: nn.Module) -> None:
        _require_module(model, "guard")
        self.model = model
        self.report = Report(tool="guard")
        self._handles: list[RemovableHandle] = []
        self._seen: dict[tuple, Finding] = {}
        self._install()

    def _install(self) -> None:
        for name, module in self.model.named_modules():
            dtypes = set(own_float_dtypes(module).values())
            if len(dtypes) == 1:
                target = getattr(torch, dtypes.pop())
                hook = self._pre_hook(name, target, _casts_all(module))
                self._handles.append(module.register_forward_pre_hook(hook, with_kwargs=True))
            elif len(dtypes) > 1:
                log.warning(
                    "dtype-doctor guard: '%s' (%s) holds parameters in %s; casting its inputs cannot make "
                    "it run, use dtype_doctor.fix(model, dtype) to unify it",
                    name or "<root>",
                    type(module).__name__,
                    " and ".join(sorted(dtypes)),
                )

    def _pre_hook(self, name: str, target: torch.dtype, scalars: bool):
        def hook(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
            if not any(needs_cast(t, target, scalars) for t in iter_tensors((args, kwargs))):
                return None  # the common case: nothing to cast, no new tuples
            try:
                names = argument_names(module) or []
                new_args = tuple(
                    self._cast_one(
                        name, module, names[i] if i < len(names) else f"arg{i}", a, target, scalars
                    )
                    for i, a in enumerate(args)
                )
                new_kwargs = {
                    k: self._cast_one(name, module, k, v, target, scalars) for k, v in kwargs.items()
                }
            except Exception as exc:  # never let the guard itself break the user's forward
                log.warning(
                    "dtype-doctor guard: could not cast the inputs of '%s': %r", name or "<root>", exc
                )
                return None
            return new_args, new_kwargs

        return hook

    def _cast_one(
        self, name: str, module: nn.Module, arg: str, value: Any, target: torch.dtype, scalars: bool
    ) -> Any:
        def cast(t: torch.Tensor) -> torch.Tensor:
            if not needs_cast(t, target, scalars):
                return t
            self._record(name, module, arg, t, target)
            return t.to(target)

        return map_tensors(value, cast)

    def _record(self, name: str, module: nn.Module, arg: str, t: torch.Tensor, target: torch.dtype) -> None:
        src, dst = dtype_name(t.dtype), dtype_name(target)
        key = (name, arg, src, dst)
        known = self._seen.get(key)
        if known is not None:  # every later cast only counts: cheap inside a training loop
            known.count += 1
            return
        module_name = name or "<root>"
        finding = catalog.finding(
            MODULE_INPUT_CAST,
            names={
                "module": f"'{module_name}'",
                "input": arg,
                "dtype": torch_name(dst),
                "other_dtype": torch_name(src),
            },
            message=f"cast input '{arg}' of '{module_name}' from {src} to {dst}",
            location=Location(module=name, module_type=type(module).__name__),
            operands=[Operand(role="input", dtype=src, shape=list(t.shape), name=arg)],
        )
        self._seen[key] = finding
        self.report.findings.append(finding)
        log.warning(
            "dtype-doctor guard: cast input '%s' of '%s' (%s) from %s to %s (logged once)",
            arg,
            module_name,
            type(module).__name__,
            src,
            dst,
        )

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def __enter__(self) -> Guard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def _require_module(model: object, what: str) -> None:
    if not isinstance(model, nn.Module):
        raise TypeError(f"{what} expects a torch.nn.Module, got {type(model).__name__}")


def guard(model: nn.Module) -> Guard:
    """Make a model with mixed dtypes run, and log every cast it needed; the model is not changed.

    A forward pre-hook on each module whose own floating parameters share one dtype casts the
    floating inputs of that module to it (a float32 activation reaching an fp16 Linear becomes fp16);
    torch.nn layers cast every floating input, other modules leave 0-d/1-d inputs (a timestep, an EDM
    `sigma`) as the model's own code expects them.
    A module that holds parameters of two dtypes cannot be helped by casting its inputs: guard logs a
    warning naming it and `fix(model, dtype)` is the remedy. Each (module, input, dtype) that had to
    be cast is one `module-input-cast` finding in `.report`, with how many times it happened: the
    list of places to fix for good. Use `g = guard(model)` ... `g.remove()`, or
    `with guard(model) as g:`, e.g.

        with guard(model) as g:
            model(x)
        print(g.report)  # module-input-cast at encoder.proj: input float32 -> float16, 12 casts
    """
    return Guard(model)
