"""What a model's dtypes are and which of its modules a precision policy keeps in fp32.

Shared by audit (what is), fix (what should be) and check (what the mirror runs in).
"""

from __future__ import annotations

import fnmatch
import re
from collections import Counter
from collections.abc import Iterable

import torch
from torch import nn

from ..dtypes import canonical, dtype_name, to_torch_dtype  # noqa: F401 (re-exported)
from ..errors import DoctorError
from ..tensors import is_compute_float

# A pattern matching one of these class-name words marks a layer that is numerically fragile in
# low precision and commonly kept in fp32 on purpose.
NORM_WORDS = ("norm",)

KeepPattern = str | type | re.Pattern


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
    """The one keep-fp32 pattern language (fix, guard, check, audit, compare, numerics).

    A pattern is a module class (isinstance), or a string that matches a module when its qualified
    name matches it as a glob ("layers.*.mlp") or contains it as a regular expression ("norm",
    "^lm_head$", "layers\\.0\\."), or its class name contains it, case-blind ("norm" keeps
    LayerNorm, GroupNorm, LlamaRMSNorm...). `select` gives an exact module path precedence ("0.1"
    keeps module 0.1 only), then a glob that matches paths ("blocks.1.*": its children). A compiled pattern is searched in the name only."""
    if isinstance(pattern, type):
        return isinstance(module, pattern)
    if isinstance(pattern, re.Pattern):  # a library's own list: names only, as the library matches them
        return bool(pattern.search(name))
    if any(c in pattern for c in "*?[") and fnmatch.fnmatchcase(name, pattern):
        return True
    try:
        if re.search(pattern, name):
            return True
    except re.error:
        if pattern in name:
            return True
    return pattern.lower() in type(module).__name__.lower()


def _shown(pattern: KeepPattern) -> str:
    return pattern.__name__ if isinstance(pattern, type) else getattr(pattern, "pattern", pattern)


def select(
    model: nn.Module, patterns: Iterable[KeepPattern], *, strict: bool = True
) -> list[tuple[str, nn.Module]]:
    """The top-most modules matching any pattern (their whole subtree is kept), in model order.

    strict: a pattern that matches no module raises DoctorError (a typo would silently keep nothing
    in float32), and so does the empty string (it would keep the whole model)."""
    patterns = tuple(patterns)
    if not patterns:
        return []
    modules = [(n, m) for n, m in model.named_modules() if n]
    paths = {n for n, _ in modules}
    chosen: set[str] = set()
    for pattern in patterns:
        if isinstance(pattern, str) and not pattern:
            raise DoctorError("keep_fp32: an empty pattern would keep the whole model; name modules")
        hits: set[str] = set()
        if isinstance(pattern, str) and pattern in paths:
            hits = {pattern}  # an exact path: that module only ("0.1" is not also "10.1")
        elif isinstance(pattern, str) and any(c in pattern for c in "*?["):
            hits = {n for n in paths if fnmatch.fnmatchcase(n, pattern)}  # a glob: "blocks.1.*", not blocks.1
        if not hits:
            hits = {n for n, m in modules if matches(pattern, n, m)}
        if strict and not hits:
            raise DoctorError(f"keep_fp32: no module matches {_shown(pattern)!r}")
        chosen |= hits
    kept: list[tuple[str, nn.Module]] = []
    for name, module in modules:
        if name in chosen and not any(name.startswith(k + ".") for k, _ in kept):
            kept.append((name, module))
    return kept


def kept_modules(model: nn.Module, patterns: Iterable[KeepPattern]) -> list[tuple[str, nn.Module]]:
    """The top-most modules matching any pattern; patterns that match nothing are ignored."""
    return select(model, patterns, strict=False)
