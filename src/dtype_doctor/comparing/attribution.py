"""Which modules lose the most in low precision, and what keeping them in fp32 buys back.

Per-layer attribution uses the numeric-suite "shadow" approach: while the fp32 reference
runs, every module's fp32 input is cast and fed to the same module of a low-precision copy,
and the two outputs are compared. Each module is judged on identical inputs, so errors do
not accumulate from earlier layers and the ranking points at the module itself.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

from ..numerics.apart import call_apart
from ..repair.keep import KEEP_STRATEGIES, keep_in_fp32
from ..tensors import float_tensors, has_nonfinite, isolate_state, map_tensors
from .measure import ErrorStats, error_stats

ContextFactory = Callable[[], contextlib.AbstractContextManager]


@dataclass
class LayerError:
    module: str
    module_type: str
    error: ErrorStats | None  # None: the module produced no float output
    calls: int = 1
    failed: str | None = None  # exception text when the shadow call raised
    input_overflow: bool = False  # its fp32 input is already out of range of the low dtype
    params: int = 0  # parameters it holds, its submodules' included
    explained_by: str | None = None  # a child whose error accounts for this module's

    @property
    def score(self) -> float:
        """Relative L2 error of the module's output; -1 when it could not be measured."""
        if self.failed:
            return -1.0
        return self.error.rel_l2 if self.error else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "module": self.module,
            "module_type": self.module_type,
            "rel_l2": self.score if not self.failed else None,
            "max_abs": self.error.max_abs if self.error else None,
            "cosine": self.error.cosine if self.error else None,
            "nonfinite": self.error.nonfinite if self.error else 0,
            "calls": self.calls,
            "failed": self.failed,
            "explained_by": self.explained_by,
            "input_overflow": self.input_overflow,
            "params": self.params,
        }


def input_dtypes(
    model: torch.nn.Module, run: Callable[[torch.nn.Module], Any]
) -> dict[str, list[torch.dtype]]:
    """The dtypes of each module's float inputs (in order) in a real run of `model`."""
    seen: dict[str, list[torch.dtype]] = {}
    handles = []

    def hook(name: str, module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        if name not in seen:
            seen[name] = [t.dtype for _, t in float_tensors((args, kwargs))]

    for name, module in model.named_modules():
        handles.append(module.register_forward_pre_hook(functools.partial(hook, name), with_kwargs=True))
    try:
        with torch.no_grad():
            run(model)
    except Exception:
        pass  # modules reached before the failure keep their dtypes
    finally:
        for h in handles:
            h.remove()
    return seen


def cast_like(obj: Any, dtypes: list[torch.dtype], default: torch.dtype | None) -> Any:
    """Cast the float tensors of `obj`, in order, to `dtypes` (then `default`, or leave them)."""
    queue = list(dtypes)

    def cast(t: torch.Tensor) -> torch.Tensor:
        if not t.is_floating_point():
            return t
        dtype = queue.pop(0) if queue else default
        return t if dtype is None or t.dtype == dtype else t.to(dtype)

    return map_tensors(obj, cast)


def _params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def shadow_errors(
    reference: torch.nn.Module,
    shadow: torch.nn.Module,
    run: Callable[[torch.nn.Module], Any],
    input_dtype: torch.dtype | None,
    context: ContextFactory,
    seen_dtypes: dict[str, list[torch.dtype]] | None = None,
) -> list[LayerError]:
    """Error of every submodule of `shadow` against `reference`, fed the reference's inputs.

    `run(reference)` drives one forward. Each shadow module gets the reference module's inputs
    cast to the dtypes that module saw in a real run of the shadow model (`seen_dtypes`, from
    `input_dtypes`), else to `input_dtype` (None: left as they are, e.g. under autocast).
    `context` wraps each shadow call (autocast, or nothing).
    """
    shadows = dict(shadow.named_modules())
    seen_dtypes = seen_dtypes or {}
    results: dict[str, LayerError] = {}
    handles = []

    def hook(name: str, module: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        twin = shadows.get(name)
        if twin is None:
            return
        entry = results.get(name)
        try:
            # the shadow must not change state the reference run goes on using (a KV cache...)
            a, k = cast_like(isolate_state((args, kwargs)), seen_dtypes.get(name, []), input_dtype)
            overflow = has_nonfinite((a, k)) and not has_nonfinite((args, kwargs))
            with torch.no_grad(), context():
                low = call_apart(twin, *a, **k)
            err = error_stats(low, output)
        except Exception as exc:
            text = f"not measured: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            if entry is None:
                results[name] = LayerError(
                    name, type(module).__name__, None, failed=text, params=_params(module)
                )
            return
        if entry is None:
            results[name] = LayerError(
                name, type(module).__name__, err, input_overflow=overflow, params=_params(module)
            )
        else:
            entry.calls += 1
            entry.input_overflow |= overflow
            if err is not None and (entry.error is None or err.rel_l2 > entry.error.rel_l2):
                entry.error = err

    for name, module in reference.named_modules():
        if name:  # the root is the whole model: that is the end-to-end error
            handles.append(module.register_forward_hook(functools.partial(hook, name), with_kwargs=True))
    try:
        with torch.no_grad():
            run(reference)
    finally:
        for h in handles:
            h.remove()
    return mark_explained(list(results.values()))


def mark_explained(layers: list[LayerError], factor: float = 2.0) -> list[LayerError]:
    """A container is explained by its parts when its error is at most `factor` × the summed
    errors of its nearest measured descendants (errors of parts add up at most linearly);
    it then points at its worst part. A container that adds error of its own (a softmax or a
    residual sum in its forward that overflows) stays in the ranking.

    Without this the ranking would list every ancestor of a fragile layer above it, and a whole
    stack of blocks (whose accumulated error is larger than any block's) at the top.
    """
    by_name = {layer.module: layer for layer in layers}
    for layer in sorted(layers, key=lambda x: -x.module.count(".")):  # deepest first
        parts = _nearest_parts(layer.module, by_name)
        measured = [p for p in parts if p.score >= 0]
        if not measured or layer.score < 0:
            continue
        worst = max(measured, key=lambda p: p.score)
        total = sum(p.score for p in measured)
        if worst.score > 0 and layer.score <= factor * total:
            layer.explained_by = worst.explained_by or worst.module
    return layers


def _nearest_parts(name: str, by_name: dict[str, LayerError]) -> list[LayerError]:
    """Measured descendants of `name` with no measured module between them and `name`."""
    prefix = name + "."
    below = [n for n in by_name if n.startswith(prefix)]
    return [by_name[n] for n in below if not any(n.startswith(m + ".") for m in below if m != n)]


def rank(layers: Iterable[LayerError]) -> list[LayerError]:
    """Modules ordered by their own error, worst first; containers explained by a child left out."""
    return sorted((layer for layer in layers if not layer.explained_by), key=lambda layer: -layer.score)


def top_modules(
    ranked: list[LayerError], k: int, floor: float = 0.0, max_params: int | None = None
) -> list[str]:
    """The k worst modules, none nested in another, each above `floor` and holding at most
    `max_params` parameters (keeping a third of the model in fp32 is not a mixed-precision fix)."""
    chosen: list[str] = []
    for layer in ranked:
        if len(chosen) >= k or layer.score <= floor:
            break
        if max_params is not None and layer.params > max_params:
            continue
        if any(_nested(layer.module, c) for c in chosen):
            continue
        chosen.append(layer.module)
    return chosen


def keep_candidates(
    layers: Iterable[LayerError], top_k: int, max_params: int | None = None
) -> list[list[str]]:
    """Keep-in-fp32 sets worth measuring, most promising first: every module of the type with the
    largest per-module error, then of the next type, then the `top_k` worst modules of any type.
    (One norm class that overflows is usually repeated in every block: keeping the three worst
    instances leaves the others wrong.) Sets over `max_params` parameters are left out."""
    layers = [layer for layer in layers if not layer.failed]
    ranked = rank(layers)
    worst: dict[str, float] = {}
    for layer in ranked:
        if layer.score > 0:
            worst[layer.module_type] = max(worst.get(layer.module_type, 0.0), layer.score)
    sets: list[list[str]] = []
    for module_type in sorted(worst, key=lambda t: -worst[t])[:2]:
        members: list[str] = []
        for layer in sorted(layers, key=lambda x: x.module):
            if layer.module_type == module_type and not any(_nested(layer.module, m) for m in members):
                members.append(layer.module)
        params = sum(layer.params for layer in layers if layer.module in members)
        if members and (max_params is None or params <= max_params):
            sets.append(members)
    top = top_modules(ranked, top_k, 0.0, max_params)
    if top and sorted(top) not in [sorted(s) for s in sets]:
        sets.append(top)
    return sets[:3]


def _nested(a: str, b: str) -> bool:
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def first_nonfinite(model: torch.nn.Module, run: Callable[[torch.nn.Module], Any]) -> tuple[str, str] | None:
    """(module path, class) of the first module whose output is non-finite while its inputs were not."""
    found: list[tuple[str, str]] = []
    handles = []

    def hook(name: str, module: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        if found or not has_nonfinite(output):
            return
        if has_nonfinite(args) or has_nonfinite(kwargs):
            return
        found.append((name or "<root>", type(module).__name__))

    for name, module in model.named_modules():
        handles.append(module.register_forward_hook(functools.partial(hook, name), with_kwargs=True))
    try:
        with torch.no_grad():
            run(model)
    except Exception:
        pass
    finally:
        for h in handles:
            h.remove()
    return found[0] if found else None


def select_modules(model: torch.nn.Module, patterns: Iterable[str]) -> list[str]:
    """Top-most module paths matching any keep-fp32 pattern (policy.matches: the one pattern language);
    DoctorError on a pattern that matches nothing."""
    from ..repair.policy import select

    return [name for name, _ in select(model, patterns)]


def to_precision(
    model: torch.nn.Module,
    dtype: torch.dtype,
    keep_fp32: Iterable[str] = (),
    autocast: bool = False,
    strategy: str = "fp32-out",
) -> torch.nn.Module:
    """Cast `model` to `dtype` (or, with autocast=True, leave it fp32 for torch.autocast) while
    the modules matching `keep_fp32` (paths, globs, class names) run in fp32, cast at their borders
    (repair's `keep_in_fp32`, with `strategy` "fp32-out" or "cast-back" to `dtype`; under autocast
    their outputs stay fp32 whatever the strategy: autocast casts them where it needs to).

    This is exactly what `compare` measures in its "+keep" rows. The kept modules' fp32 weights
    are taken before the cast, so they are not rounded through the low dtype.
    """
    if strategy not in KEEP_STRATEGIES:
        raise ValueError(f"strategy must be one of {KEEP_STRATEGIES}")
    names = select_modules(model, keep_fp32)
    if autocast:
        keep_in_fp32(model, names, strategy="fp32-out")
        return model
    prefixes = tuple(n + "." for n in names)
    fp32_state = {k: v.detach().clone() for k, v in model.state_dict().items() if k.startswith(prefixes)}
    model.to(dtype)
    keep_in_fp32(model, names, strategy=strategy, out_dtype=dtype, fp32_state=fp32_state)
    return model


__all__ = [
    "LayerError",
    "cast_like",
    "first_nonfinite",
    "input_dtypes",
    "keep_candidates",
    "rank",
    "select_modules",
    "shadow_errors",
    "to_precision",
    "top_modules",
]
