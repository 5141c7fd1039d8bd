"""Facts about a model that hold for one root call, computed once in it, not once per finding.

A run with a mismatch in every layer builds a finding per layer (193 on a Llama-7B shape), and each
asked the same whole-model questions (which dtype most parameters have, is the model already all
float16): each a walk of every parameter. Its parameters' dtypes do not change inside the call, so
the answers are kept while the call runs (the session calls `begin` and `end`); outside a root call
every question is answered afresh.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

_memo: dict[tuple[int, str], tuple[weakref.ref, Any]] = {}
_in_call = [False]  # answers are kept only while a root call runs: outside one, a model may change


def remembered(obj: Any, question: str, answer: Callable[[], Any]) -> Any:
    """`answer()`, kept for `obj` (weakly) and `question` while the root call runs."""
    if not _in_call[0]:
        return answer()
    key = (id(obj), question)
    kept = _memo.get(key)
    if kept is not None and kept[0]() is obj:
        return kept[1]
    value = answer()
    _memo[key] = (weakref.ref(obj), value)
    return value


def begin() -> None:
    """A root call begins: what was kept is forgotten, answers are kept from now on."""
    _memo.clear()
    _in_call[0] = True


def end() -> None:
    """The root call ended: the model may change before the next one."""
    _memo.clear()
    _in_call[0] = False
