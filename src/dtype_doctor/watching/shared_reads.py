"""A tensor held by a module that models of different dtypes share (a memoised rotary module): no
single dtype suits it, so casting it once, or where it was born, breaks the other model. The fix is
where the module reads it: cast to the dtype of a tensor that method was given (`.to(q.dtype)`),
which each model's call brings in its own dtype.
"""

from __future__ import annotations

import weakref
from types import FrameType

import torch
from torch import nn

from .. import remedies
from ..catalog.shared_remedies import CAST_AT_READ
from ..editing.birth_line import read_cast
from ..report import Fix, Origin
from . import attributes, shared_modules

# (module, attribute) -> the reading method's parameter seen in the consumer's dtype while it ran
_like: weakref.WeakKeyDictionary[nn.Module, dict[str, str]] = weakref.WeakKeyDictionary()


def shared_owner(origin: Origin | None, root: nn.Module | None) -> tuple[nn.Module, str] | None:
    """(the module holding the parameter or buffer `origin` names, the attribute), when another model
    than `root` holds that module too."""
    if origin is None or root is None or origin.kind not in ("parameter", "buffer") or not origin.name:
        return None
    path, _, attribute = origin.name.rpartition(".")
    try:
        owner = root.get_submodule(path) if path else root
    except AttributeError:
        return None
    return (owner, attribute) if shared_modules.shared_outside(owner, root) else None


def _given(owner: nn.Module, method: str, frames: list[FrameType], dtype: torch.dtype) -> str | None:
    """A parameter of `owner.method`'s live call (in `frames`) holding a floating tensor of `dtype`."""
    for frame in frames:
        code = frame.f_code
        if code.co_name != method or frame.f_locals.get("self") is not owner:
            continue
        for name in code.co_varnames[1 : code.co_argcount + code.co_kwonlyargcount]:
            value = frame.f_locals.get(name)
            if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype == dtype:
                return name
    return None


def read_fix(
    origin: Origin | None, root: nn.Module | None, frames: list[FrameType], want: torch.dtype
) -> Fix | None:
    """The cast where the shared module's method reads the held tensor, in the user's names, or None
    (not shared, no read found, no parameter of the consumer's dtype seen in the reading call)."""
    found = shared_owner(origin, root)
    read = attributes.first_read(type(found[0]), found[1]) if found is not None else None
    if found is None or read is None:
        return None
    owner, attribute = found
    file, line, method = read
    seen = _like.setdefault(owner, {})
    like = _given(owner, method.rsplit(".", 1)[-1], frames, want) or seen.get(attribute)
    if like is None:
        return None
    seen[attribute] = like
    rewritten = read_cast(file, line, attribute, f"{like}.dtype")
    if rewritten is None:
        return None
    statement, at = rewritten
    return remedies.make(
        CAST_AT_READ, file=file, line=at, made=statement, name=attribute, like=like, method=method
    )
