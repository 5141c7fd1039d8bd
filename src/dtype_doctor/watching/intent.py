"""The dtype the program asked for, read off the operands' dtype births (issue 29, item 2).

Nothing is float16 or bfloat16 by default: a low-precision tensor was asked for (a cast, `.half()`,
`torch_dtype`, autocast, `dtype=`). A float32 or float64 tensor is either asked for too (an explicit
`.float()`, `dtype=torch.float32`, a module-wide `.float()`: a deliberate upcast, which is intent) or
born by default (a factory without `dtype=`, a parameter created in the default dtype, NumPy's
float64). When the low operands were asked for and the wide ones were only defaulted, the wide ones
are the minority to cast, wherever the op surfaced.
"""

from __future__ import annotations

import linecache
import re
from typing import Any

import torch

from .births import BirthTag
from .provenance import Frame, ParamTag, Provenance, Tag

LOW = (torch.float16, torch.bfloat16)
_EXPLICIT_DTYPE = re.compile(r"\bdtype\s*=|\.(?:float|double|to|type)\(")
_MAX_STEPS = 12


def _explicit_on_line(frame: Frame | None) -> bool:
    if frame is None:
        return False
    return bool(_EXPLICIT_DTYPE.search(linecache.getline(frame[0].co_filename, frame[1])))


def asked_for(tag: Tag | None) -> bool | None:
    """Whether the code asked for this dtype along the tensor's lineage (None: its birth is unknown)."""
    if tag is None:
        return None
    if tag.dtype in LOW:
        return True
    current = tag
    for _ in range(_MAX_STEPS):
        if isinstance(current, ParamTag) and current.frame is None:
            return None  # a parameter made before the watch: its birth is unknown
        if current.kind in ("cast", "autocast"):
            return True
        if isinstance(current, BirthTag) and current.op:  # a module-wide conversion
            return True
        if current.kind in ("op", "parameter", "buffer") and _explicit_on_line(current.frame):
            return True
        same = [p for p in current.parents if p.dtype == current.dtype]
        if not same:
            return False
        current = same[0]
    return False


def _holds_low(root: Any) -> bool:
    try:
        return any(p.dtype in LOW for p in root.parameters()) if root is not None else False
    except Exception:
        return False


def intended(tensors: list[torch.Tensor], prov: Provenance, root: Any) -> torch.dtype | None:
    """The low dtype the operands should share, when each low operand was asked for and each wider
    one was born by default (and is not a parameter of an all-wide model: there the half input is
    the odd one); None when the births do not say (unknown, or a deliberate upcast)."""
    floats = [t for t in tensors if t.is_floating_point()]
    low = {t.dtype for t in floats if t.dtype in LOW}
    wide = [t for t in floats if t.dtype not in LOW]
    if len(low) != 1 or not wide:
        return None
    for t in wide:
        tag = prov.lookup(t)
        if asked_for(tag) is not False:
            return None
        if tag is not None and tag.kind in ("parameter", "buffer") and not _holds_low(root):
            return None
    return next(iter(low))
