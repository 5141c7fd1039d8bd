"""What a model's dtypes are and which of its modules a precision policy keeps in fp32.

Shared by audit (what is), fix (what should be) and check (what the mirror runs in).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import nn

from .dtypes import canonical
from .errors import DoctorError

# A pattern matching one of these class-name words marks a layer that is numerically fragile in
# low precision and commonly kept in fp32 on purpose.
NORM_WORDS = ("norm",)

KeepPattern = str | type | re.Pattern


def is_compute_float(t: torch.Tensor) -> bool:
    """Floating, and not a float8 storage format (fp8 weights and their scales are a quantization
    design, never converted, cast to or compared by a dtype policy)."""
    return t.is_floating_point() and t.element_size() > 1


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def to_torch_dtype(value: torch.dtype | str) -> torch.dtype:
    """torch.float16, "fp16", "half", "torch.bfloat16"... → torch.dtype; DoctorError otherwise."""
    if isinstance(value, torch.dtype):
        return value
    name = canonical(value)
    if name is None:
        raise DoctorError(f"unknown dtype {value!r}: expected e.g. float32, float16, bfloat16")
    return getattr(torch, name)


def own_float_dtypes(module: nn.Module, buffers: bool = False) -> dict[str, str]:
    """Direct (non-recursive) floating parameters (and buffers) → dtype name."""
    found = {n: dtype_name(p.dtype) for n, p in module.named_parameters(recurse=False) if is_compute_float(p)}
    if buffers:
        for n, b in module.named_buffers(recurse=False):
            if b is not None and is_compute_float(b):
                found[n] = dtype_name(b.dtype)
    return found


def dominant_dtype(module: nn.Module) -> str | None:
    """The floating dtype holding most parameter elements (the dtype the model "is in")."""
    counts: Counter[str] = Counter()
    for p in module.parameters():
        if is_compute_float(p):
            counts[dtype_name(p.dtype)] += p.numel()
    return counts.most_common(1)[0][0] if counts else None


def hf_keep_fp32(model: nn.Module, dtype: torch.dtype) -> tuple[str, ...]:
    """The modules transformers/diffusers keep in fp32 when loading in `dtype`.

    transformers: `_keep_in_fp32_modules` for fp16, `_keep_in_fp32_modules_strict` for fp16 and bf16;
    diffusers: `_keep_in_fp32_modules`. Submodels (a text model inside a VLM) declare their own.
    """
    names: list[str] = []
    for module in model.modules():
        plain = getattr(module, "_keep_in_fp32_modules", None)
        strict = getattr(module, "_keep_in_fp32_modules_strict", None)
        if dtype == torch.float16 or (_is_diffusers(module) and dtype == torch.bfloat16):
            names.extend(plain or ())
        if dtype in (torch.float16, torch.bfloat16):
            names.extend(strict or ())
    return tuple(dict.fromkeys(names))


def _is_diffusers(module: nn.Module) -> bool:
    return type(module).__module__.startswith("diffusers")


def matches(pattern: KeepPattern, name: str, module: nn.Module) -> bool:
    """A keep pattern: a module class (isinstance), or a string searched in the module's qualified
    name (a regular expression, so "norm", "^lm_head$" and "layers\\.0\\." all work) and, case-blind,
    in its class name ("norm" keeps LayerNorm, GroupNorm, LlamaRMSNorm...). A compiled pattern is
    searched in the name only."""
    if isinstance(pattern, type):
        return isinstance(module, pattern)
    if isinstance(pattern, re.Pattern):  # a library's own list: names only, as the library matches them
        return bool(pattern.search(name))
    try:
        if re.search(pattern, name):
            return True
    except re.error:
        if pattern in name:
            return True
    return pattern.lower() in type(module).__name__.lower()


def kept_modules(model: nn.Module, patterns: Iterable[KeepPattern]) -> list[tuple[str, nn.Module]]:
    """The top-most modules matching any pattern (their whole subtree is kept)."""
    patterns = tuple(patterns)
    if not patterns:
        return []
    kept: list[tuple[str, nn.Module]] = []
    for name, module in model.named_modules():
        if not name or any(name.startswith(k + ".") for k, _ in kept):
            continue
        if any(matches(p, name, module) for p in patterns):
            kept.append((name, module))
    return kept


def iter_tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from iter_tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from iter_tensors(v)


def map_tensors(value: Any, fn) -> Any:
    """Apply fn to every tensor in nested lists/tuples/dicts (namedtuples and dict subclasses kept)."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(map_tensors(v, fn) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(map_tensors(v, fn) for v in value)
    if isinstance(value, dict):
        out = {k: map_tensors(v, fn) for k, v in value.items()}
        try:
            return type(value)(out) if type(value) is not dict else out
        except Exception:
            return out
    return value
