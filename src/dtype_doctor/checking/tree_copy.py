"""copy.deepcopy for module trees, the same copy made faster (check's mirror, fix replays' twins).

copy.deepcopy takes its generic path (`__reduce_ex__`, `_reconstruct`) for every module and for each
of the ~12 hook OrderedDicts every module holds: ~5000 objects for a Llama-7B, most of the mirror's
time. Modules of the default protocol and the plain containers they hold are copied here directly.
"""

from __future__ import annotations

import copy
import copyreg
from collections import OrderedDict
from typing import Any

import torch
from torch import nn

__all__ = ["deepcopy_tree"]

_ATOMS = frozenset({int, float, bool, complex, str, bytes, type(None), torch.dtype, torch.device})
_MODULE_PROTOCOL = (object.__reduce_ex__, object.__reduce__, nn.Module.__getstate__, nn.Module.__setstate__)
_default_protocol: dict[type, bool] = {}


def _plain_module(cls: type) -> bool:
    """Whether `copy.deepcopy` copies instances of `cls` as it copies any nn.Module: a new object, its
    `__getstate__()` deep-copied into `__setstate__` (no custom copy or pickling hook, no slots)."""
    try:
        return _default_protocol[cls]
    except KeyError:
        plain = (
            issubclass(cls, nn.Module)
            and (cls.__reduce_ex__, cls.__reduce__, cls.__getstate__, cls.__setstate__) == _MODULE_PROTOCOL
            and getattr(cls, "__deepcopy__", None) is None
            and getattr(cls, "__getnewargs_ex__", None) is None
            and getattr(cls, "__getnewargs__", None) is None
            and not issubclass(cls, (list, dict))
            and not copyreg._slotnames(cls)  # type: ignore[attr-defined]
            and cls not in copy._deepcopy_dispatch  # type: ignore[attr-defined]
            and cls not in copyreg.dispatch_table
        )
        _default_protocol[cls] = plain
        return plain


def deepcopy_tree(x: Any, memo: dict[int, Any] | None = None) -> Any:
    """`copy.deepcopy(x, memo)`, the same copy made faster for module trees: modules of the default
    protocol, their dicts and empty hook dicts, sets of strings and atoms are copied here directly
    (as deepcopy would: one copy per object, shared ones shared, originals kept alive in the memo);
    anything else goes to `copy.deepcopy`. A 7B model's ~5000 hook dicts made deepcopy most of the mirror."""
    if memo is None:
        memo = {}
    cls = type(x)
    if cls in _ATOMS:
        return x
    y = memo.get(id(x), memo)
    if y is not memo:
        return y
    if cls is dict:
        y = memo[id(x)] = {}
        for k, v in x.items():
            y[deepcopy_tree(k, memo)] = deepcopy_tree(v, memo)
    elif cls is OrderedDict and not x:
        y = memo[id(x)] = OrderedDict()
    elif cls is set and all(type(v) in _ATOMS for v in x):
        y = memo[id(x)] = set(x)
    elif _plain_module(cls):
        y = memo[id(x)] = cls.__new__(cls)
        state = x.__getstate__()
        y.__setstate__({k: deepcopy_tree(v, memo) for k, v in state.items()})
    else:
        return copy.deepcopy(x, memo)
    memo.setdefault(id(memo), []).append(x)  # as deepcopy's _keep_alive: ids stay unique meanwhile
    return y
