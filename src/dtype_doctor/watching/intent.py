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
from .blame import root_majority
from .provenance import Frame, ParamTag, Provenance, Tag, where

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


def upcast_from_low(tag: Tag | None) -> bool:
    """The tensor's float32 comes from a cast of float16/bfloat16 data (`x.float()` on a half
    activation): precision raised on purpose. A cast of integers or float64 to float32 only picks the
    default float, which is not an upcast."""
    current = tag
    for _ in range(_MAX_STEPS):
        if current is None or current.dtype in LOW:
            return False
        if current.kind == "cast":
            return any(p.dtype in LOW for p in current.parents)
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


def asked_at(tag: Tag | None) -> str | None:
    """Where the code asked for this tensor's dtype, as the user reads it (`Tensor.half at x.py:5`,
    `a module-wide .to() at x.py:9`, `torch.autocast`, `an explicit dtype at x.py:7`); None when
    it was not."""
    current = tag
    for _ in range(_MAX_STEPS):
        if current is None:
            return None
        file, line, _ = where(current.user or current.frame)
        at = f" at {file}:{line}" if file else ""
        if current.kind == "autocast":
            return "torch.autocast"
        if current.kind == "cast":
            chosen = _chosen(current)
            return f"{current.op}{at}" + (f", its dtype {chosen}" if chosen else "")
        if isinstance(current, BirthTag) and current.op:
            return f"a module-wide .{current.op.rsplit('.', 1)[-1]}(){at}"
        same = [p for p in current.parents if p.dtype == current.dtype]
        if same and same[0].kind == "cast":
            current = same[0]  # registered from a cast: the cast is where it was asked for
            continue
        if current.kind in ("op", "parameter", "buffer") and _explicit_on_line(current.frame):
            file, line, _ = where(current.frame)
            return f"an explicit dtype at {file}:{line}"
        current = same[0] if same else None
    return None


def _chosen(cast: Tag) -> str | None:
    """`COMPUTE_DTYPE at x.py:8`: where a cast's dtype argument was written (a constant, a variable)."""
    found = next((p for p in cast.parents if p.kind == "value"), None)
    while found is not None and found.parents:
        found = found.parents[0]
    if found is None:
        return None
    file, line, _ = where(found.frame)
    return f"{found.name} at {file}:{line}"


def deliberate(t: torch.Tensor, prov: Provenance) -> str | None:
    """`float32 asked for at x.py:9` when a wide tensor was upcast on purpose (an fp32 norm, loss or
    table): intent, which a repair must not lower."""
    if t.dtype in LOW or not t.is_floating_point():
        return None
    tag = prov.lookup(t)
    if asked_for(tag) is not True:
        return None
    at = asked_at(tag)
    dt = str(t.dtype).removeprefix("torch.")
    return f"{dt} asked for ({at}): a deliberate upcast, not to be lowered" if at else None


def _dt(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def float64_beside_state(
    expected: torch.dtype | None, want: torch.dtype | None, floats: list[torch.Tensor], names: Any
) -> bool:
    """The op's rule asks for float64 (the wider operand's), but a parameter or buffer among the
    operands is in the model's own dtype `want`: the float64 data intrudes into a module's state."""
    return (
        expected is torch.float64
        and want is not None
        and want is not torch.float64
        and any(t.dtype is want and names.tensor(t) is not None for t in floats)
    )


def rule_evidence(
    tensors: list[torch.Tensor], names: Any, expected: torch.dtype, place: str, root: Any, prov: Provenance
) -> str:
    """Why the op's own rule expects `expected`: autocast's dtype, the weights that consume the data
    (a parameter or buffer among the operands), the model's majority, or the operands that agree."""
    device = next((t.device.type for t in tensors), "cpu")
    try:
        if torch.is_autocast_enabled(device) and torch.get_autocast_dtype(device) == expected:
            return f"torch.autocast's dtype ({_dt(expected)})"
    except (RuntimeError, ValueError, TypeError):
        pass
    for t in tensors:
        known = names.tensor(t) if t.dtype == expected else None
        if known is not None:
            return f"the weights of {place}, which consume the data, are {_dt(expected)}"
    if root is not None and root_majority(root) == expected:
        return model_evidence(root, prov, expected)
    return f"the other operands are {_dt(expected)}"


def asked_evidence(tensors: list[torch.Tensor], prov: Provenance, low: torch.dtype) -> str:
    """Why the low dtype is the intended one: where it was asked for; the wide operands defaulted."""
    at = next((a for t in tensors if t.dtype == low and (a := asked_at(prov.lookup(t)))), None)
    asked = f"{_dt(low)} asked for" + (f" ({at})" if at else "")
    return f"{asked}; the wider operands only took a default dtype"


def model_evidence(root: Any, prov: Provenance, want: torch.dtype) -> str:
    """`most of the model's parameters are float16 (a module-wide .half() at x.py:12)`."""
    text = f"most of the model's parameters are {_dt(want)}"
    for p in root.parameters():
        if p.dtype == want:
            at = asked_at(prov.lookup(p))
            return f"{text} ({at})" if at else text
    return text
