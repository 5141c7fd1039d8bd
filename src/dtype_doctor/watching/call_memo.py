"""Facts about a model that hold for one root call, computed once in it, not once per finding.

A run with a mismatch in every layer builds a finding per layer (193 on a Llama-7B shape), and each
asked the same whole-model questions (which dtype most parameters have, is the model already all
float16): each a walk of every parameter. Its parameters' dtypes do not change inside the call, so
the answers are kept until the session forgets them as the next root call begins or this one ends.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

_memo: dict[tuple[int, str], tuple[weakref.ref, Any]] = {}


def remembered(obj: Any, question: str, answer: Callable[[], Any]) -> Any:
    """`answer()`, kept for `obj` (weakly) and `question` until `forget()`."""
    key = (id(obj), question)
    kept = _memo.get(key)
    if kept is not None and kept[0]() is obj:
        return kept[1]
    value = answer()
    _memo[key] = (weakref.ref(obj), value)
    return value


def forget() -> None:
    _memo.clear()
