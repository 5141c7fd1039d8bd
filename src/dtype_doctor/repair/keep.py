"""The keep-in-float32 engine: chosen modules run in float32 inside a low-precision model.

`keep_in_fp32(model, patterns)` upcasts those modules' parameters and wraps their forward so that
floating inputs are cast to float32 (autocast off inside). What leaves them is the strategy's:
- "cast-back" (default): outputs cast back to `out_dtype`, or to the dtype their input came in, so
  the model's dtype flow is unchanged (what numerics applies and searches with `numerics.fp32_set`);
- "fp32-out": outputs stay float32, and every other module that owns floating parameters of a low
  dtype casts its inputs to it, so a value too large for float16 can pass from one kept module to
  the next (compare's "+keep" rows; under autocast nothing needs casting).
`fp32_state` (the fp32 model's state dict) reloads the kept modules' weights, so weights of a model
already cast are not rounded through the low dtype. A module-wide cast after `keep_in_fp32` (`model.half()`)
leaves the kept modules float32 (their `_apply`), so the call may come before the model's cast. The border casts of `fix` live here too.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from ..tensors import is_compute_float, iter_tensors, map_tensors
from .policy import KeepPattern, own_float_dtypes, select

__all__ = [
    "KEEP_STRATEGIES",
    "KeepFp32",
    "cast_inputs_hook",
    "cast_outputs_hook",
    "keep_in_fp32",
    "needs_cast",
]

KEEP_STRATEGIES = ("cast-back", "fp32-out")


def needs_cast(t: torch.Tensor, target: torch.dtype, scalars: bool = True) -> bool:
    """A floating tensor of another dtype; with `scalars=False` only activations (2+ dimensions)."""
    return is_compute_float(t) and t.dtype != target and (scalars or t.dim() >= 2)


def _caster(dtype: torch.dtype, scalars: bool = True) -> Callable[[torch.Tensor], torch.Tensor]:
    def cast(t: torch.Tensor) -> torch.Tensor:
        return t.to(dtype) if needs_cast(t, dtype, scalars) else t

    return cast


def cast_inputs_hook(dtype: torch.dtype, scalars: bool = True) -> Callable:
    """A forward pre-hook (with_kwargs=True) casting a module's floating inputs to `dtype`."""
    cast = _caster(dtype, scalars)

    def hook(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        return map_tensors(args, cast), map_tensors(kwargs, cast)

    return hook


def cast_outputs_hook(dtype: torch.dtype) -> Callable:
    """A forward hook casting a module's floating outputs to `dtype` (a ModelOutput in place)."""
    cast = _caster(dtype)

    def hook(module: nn.Module, args: tuple, output: Any) -> Any:
        if isinstance(output, dict) and type(output) is not dict:
            for key, value in list(output.items()):  # ModelOutput & co: cast in place, keep the type
                output[key] = map_tensors(value, cast)
            return output
        return map_tensors(output, cast)

    return hook


def _first_float_dtype(obj: Any) -> torch.dtype | None:
    return next((t.dtype for t in iter_tensors(obj) if t.is_floating_point()), None)


def _device_type(module: nn.Module, obj: Any) -> str:
    """Where the call computes: its first input tensor's device, else its parameters'."""
    first = next(iter_tensors(obj), None)
    if first is None:
        first = next(module.parameters(), None)
    return first.device.type if first is not None else "cpu"


def _fp32_forward(module: nn.Module, out_dtype: torch.dtype | None, cast_back: bool) -> Callable:
    # the class's forward and a weak reference: a bound method stored on the instance would make
    # a reference cycle, and the model would outlive its variant until a full gc.collect()
    own = module.__dict__.get("forward")
    method = type(module).forward
    ref = weakref.ref(module)
    up = _caster(torch.float32)

    @functools.wraps(method)
    def forward(*args: Any, **kwargs: Any) -> Any:
        back = (out_dtype or _first_float_dtype((args, kwargs))) if cast_back else None
        with torch.autocast(_device_type(ref(), (args, kwargs)), enabled=False):
            a, k = map_tensors(args, up), map_tensors(kwargs, up)
            out = own(*a, **k) if own is not None else method(ref(), *a, **k)
        return map_tensors(out, _caster(back)) if back is not None and back != torch.float32 else out

    return forward


class _KeptApply:
    """The `_apply` of a kept module: a later module-wide cast (`model.half()`, `model.to(bf16)`)
    leaves its float32 tensors float32 (their values never go through the low dtype), while a move
    to another device still applies. A weak reference to the module, as its forward holds; a deep
    copy of the module gets one of its own."""

    def __init__(self, module: nn.Module) -> None:
        self._ref = weakref.ref(module)

    def __call__(self, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        def keep(t: torch.Tensor) -> torch.Tensor:
            out = fn(t)
            if t.dtype == torch.float32 and out.is_floating_point() and out.dtype != torch.float32:
                return t.to(device=out.device)
            return out

        module = self._ref()
        if module is None:  # the module was collected: nothing is left to convert
            raise ReferenceError("the module kept in float32 no longer exists")
        return type(module)._apply(module, keep, *args, **kwargs)

    def __deepcopy__(self, memo: dict) -> _KeptApply:
        module = self._ref()
        return _KeptApply(memo.get(id(module), module))


class KeepFp32:
    """Handle of applied keep-in-float32 wrappers; `.remove()` restores forward and dtypes."""

    def __init__(
        self,
        model: nn.Module,
        paths: list[str],
        strategy: str = "cast-back",
        out_dtype: torch.dtype | None = None,
        fp32_state: dict[str, torch.Tensor] | None = None,
    ) -> None:
        if strategy not in KEEP_STRATEGIES:
            raise ValueError(f"strategy must be one of {KEEP_STRATEGIES}")
        self.paths = list(paths)
        self.strategy = strategy
        self._undo: list[Callable[[], None]] = []
        for path in self.paths:
            self._apply(path, model.get_submodule(path), strategy == "cast-back", out_dtype, fp32_state)
        if strategy == "fp32-out":
            self._cast_others(model)

    def _apply(
        self,
        path: str,
        module: nn.Module,
        cast_back: bool,
        out_dtype: torch.dtype | None,
        fp32_state: dict[str, torch.Tensor] | None,
    ) -> None:
        dtypes = {p.dtype for p in module.parameters() if p.is_floating_point()}
        before = dtypes.pop() if len(dtypes) == 1 else None
        own = module.__dict__.get("forward")
        module.float()
        if fp32_state is not None:
            prefix = path + "."
            weights = {k[len(prefix) :]: v for k, v in fp32_state.items() if k.startswith(prefix)}
            if weights:
                module.load_state_dict(weights, strict=False)
        module.forward = _fp32_forward(module, out_dtype, cast_back)
        own_apply = module.__dict__.get("_apply")
        module._apply = _KeptApply(module)  # type: ignore[method-assign]

        def undo() -> None:
            if own_apply is not None:
                module._apply = own_apply  # type: ignore[method-assign]
            else:
                module.__dict__.pop("_apply", None)
            if own is not None:
                module.forward = own
            else:
                module.__dict__.pop("forward", None)
            if before is not None:
                module.to(before)

        self._undo.append(undo)

    def _cast_others(self, model: nn.Module) -> None:
        """fp32-out: each module outside the kept ones that owns low-precision floating parameters
        or buffers casts its floating inputs to that dtype (a float32 output reaching it)."""
        handles: list[RemovableHandle] = []
        for name, module in model.named_modules():
            if any(name == k or name.startswith(k + ".") for k in self.paths):
                continue
            dtype = next(iter(own_float_dtypes(module, buffers=True).values()), None)
            if dtype is not None and dtype != "float32":
                hook = cast_inputs_hook(getattr(torch, dtype))
                handles.append(module.register_forward_pre_hook(hook, with_kwargs=True))

        def undo() -> None:
            for handle in handles:
                handle.remove()

        self._undo.append(undo)

    def remove(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()

    def __enter__(self) -> KeepFp32:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def keep_in_fp32(
    model: nn.Module,
    patterns: Iterable[KeepPattern] | str,
    *,
    strategy: str = "cast-back",
    out_dtype: torch.dtype | None = None,
    fp32_state: dict[str, torch.Tensor] | None = None,
) -> KeepFp32:
    """Run the modules matching `patterns` in float32, casting at their border; `.remove()` undoes it.

    The patterns are fix()'s keep_fp32 language (policy.matches): module paths, globs, regexes,
    class-name words, module classes. DoctorError when a pattern matches no module.
    `strategy`: "cast-back" (outputs back to `out_dtype`, default the dtype their input came in) or
    "fp32-out" (outputs stay float32; see the module docstring). `fp32_state`: the float32 model's
    state dict, to reload the kept modules' weights from."""
    if isinstance(patterns, str):
        patterns = [patterns]
    paths = [name for name, _ in select(model, patterns)]
    return KeepFp32(model, paths, strategy, out_dtype, fp32_state)
