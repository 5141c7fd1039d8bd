"""An integer tensor where the op wanted a floating one: the dtype the failure asks of it.

`result type Float can't be cast to the desired output type Long` (a BCE target made from Python
ints), `expected scalar type Float but found Long`, `Found dtype Long but expected Float` (an MSE
target): the integer operand is the odd one, and it should have been made in the floating dtype of
the op's other operands. The reverse (`expected scalar type Long but found Float`: class indices
wanted) names an integer as wanted and is not this case.
"""

from __future__ import annotations

import re

import torch

_INTEGER_NAMES = {"Long": torch.int64, "Int": torch.int32, "Short": torch.int16, "Char": torch.int8,
                  "Byte": torch.uint8}  # fmt: skip
_FLOATING_NAMES = {"Float": torch.float32, "Double": torch.float64, "Half": torch.float16,
                   "BFloat16": torch.bfloat16}  # fmt: skip
# (the dtype the op wanted, the one it found), by the message's own words
_WANTED_FOUND = (
    (re.compile(r"result type (\w+) can't be cast to the desired output type (\w+)"), 1, 2),
    (re.compile(r"expected scalar type (\w+) but found (\w+)"), 1, 2),
    (re.compile(r"[Ff]ound dtype (\w+) but expected (\w+)"), 2, 1),
)


def wanted_floating(text: str, tensors: list[torch.Tensor]) -> torch.dtype | None:
    """The floating dtype an integer operand should have had, when the message says an integer was
    found where a float was wanted and the floating operands share one dtype (else the wanted one)."""
    for pattern, want_at, found_at in _WANTED_FOUND:
        m = pattern.search(text)
        if m is None:
            continue
        wanted, found = _FLOATING_NAMES.get(m.group(want_at)), _INTEGER_NAMES.get(m.group(found_at))
        if wanted is None or found is None or not any(t.dtype is found for t in tensors):
            return None
        floats = {t.dtype for t in tensors if t.is_floating_point()}
        return floats.pop() if len(floats) == 1 else wanted
    return None


def narrower_than_float64(dtypes: list[str | None]) -> str | None:
    """The one narrower floating dtype a float64 operand meets (an fp32 model given NumPy's float64),
    by the operands' dtype names; None when there is no float64 or several narrower ones."""
    floating = {d for d in dtypes if d and d.startswith(("float", "bfloat"))}
    narrower = floating - {"float64"}
    return narrower.pop() if "float64" in floating and len(narrower) == 1 else None
