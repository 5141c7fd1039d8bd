"""Warnings torch raises from C++ during a watched op are the user's, not the watcher's.

torch turns a C++ warning into a Python one attributed to the innermost Python frame: under watch
that is the mode's `func(*args)` line in mode.py, so `filterwarnings(module=...)`, the `once`/`default`
registries and pytest's attribution would see dtype_doctor instead of the user's line. While a
session runs, a filter lets such warnings through to `warnings._showwarnmsg`, which issues them
again from the frame that called the op, as if the tool were not there. Nothing runs per op.
torch.compile's warning about global module hooks is about the watcher's own hooks: not shown.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from collections.abc import Callable
from typing import Any

from . import mode

_MODE_FILE = os.path.normcase(mode.__file__)
_TOOL_DIR = os.path.dirname(os.path.dirname(_MODE_FILE))
_FILTER = ("always", None, Warning, re.compile(re.escape(mode.__name__) + r"\Z"), 0)
# torch.compile(module) warns when global module hooks exist: under watch those are the tool's own
_OWN_HOOKS = (
    "ignore",
    re.compile(r"Using `torch\.compile\(module\)` when there are global hooks"),
    UserWarning,
    None,
    0,
)
_installed = 0
_original: Any = None


def _reissue(msg: Any) -> None:
    if os.path.normcase(str(getattr(msg, "filename", ""))) != _MODE_FILE:
        _original(msg)
        return
    frame = sys._getframe(1)
    while frame is not None and os.path.normcase(frame.f_code.co_filename).startswith(_TOOL_DIR):
        frame = frame.f_back
    if frame is None:
        _original(msg)
        return
    g = frame.f_globals
    warnings.warn_explicit(
        msg.message,
        msg.category,
        frame.f_code.co_filename,
        frame.f_lineno,
        module=g.get("__name__", "<string>"),
        registry=g.setdefault("__warningregistry__", {}),
        module_globals=g,
        source=msg.source,
    )


def redirect() -> Callable[[], None]:
    """Start re-attributing (nested sessions share one hook); returns the undo."""
    global _installed, _original
    if _installed == 0:
        _original = warnings._showwarnmsg  # type: ignore[attr-defined]
        warnings._showwarnmsg = _reissue  # type: ignore[attr-defined]
    _installed += 1
    warnings.filters[:0] = [_OWN_HOOKS, _FILTER]  # type: ignore[list-item]
    warnings._filters_mutated()  # type: ignore[attr-defined]

    def undo() -> None:
        global _installed
        _installed -= 1
        for entry in (_OWN_HOOKS, _FILTER):
            if entry in warnings.filters:
                warnings.filters.remove(entry)  # type: ignore[arg-type]
        warnings._filters_mutated()  # type: ignore[attr-defined]
        if _installed == 0 and warnings._showwarnmsg is _reissue:  # type: ignore[attr-defined]
            warnings._showwarnmsg = _original  # type: ignore[attr-defined]

    return undo
