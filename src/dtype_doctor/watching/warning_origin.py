"""Warnings torch raises during a watched op are the user's, not the watcher's.

torch turns a C++ warning into a Python one attributed to the innermost Python frame: under watch
that is the mode's `func(*args)` line in mode.py (under `--numerics`, the numerics monitor's own
modes' in numerics/opwatch.py and opscan.py: the interceptors); a Python warning with a `stacklevel` (F.softmax
without `dim`) counts the mode's frames and torch's dispatch to it (`handle_torch_function` and the
public function's outer call) and lands on them too. So `filterwarnings(module=...)`, the
`once`/`default` registries and pytest's attribution would see dtype_doctor or torch instead of the
user's line. While a session runs, a filter lets such warnings through to `warnings._showwarnmsg`,
which issues them again from the frame python would have named, as if the tool were not there.

That first pass leaves no trace: an interceptor module has no registry (`__warningregistry__` is None, which
the warnings machinery reads as "none"), and a `once` it recorded is taken back, so the user's own
filters and registries decide alone (also after `warnings.resetwarnings()` removed the filter). The
re-issue passes no `module_globals` (as `warnings.warn` does not): a `__main__` run by the tool, or
by `-m`, may have a loader that cannot serve it. Nothing runs per op. torch.compile's warning about
global module hooks is about the watcher's own hooks: not shown.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from collections.abc import Callable
from types import FrameType
from typing import Any

from ..tracing.files import TOOL_DIR
from . import mode

_PACKAGE = mode.__name__.split(".")[0]
# the modules whose frames call torch functions on the user's behalf (their torch function/dispatch modes)
_INTERCEPTORS = (mode.__name__, f"{_PACKAGE}.numerics.opwatch", f"{_PACKAGE}.numerics.opscan")
_FILES = {
    os.path.normcase(os.path.join(TOOL_DIR, *name.split(".")[1:]) + ".py"): name for name in _INTERCEPTORS
}
_FILTER = ("always", None, Warning, re.compile("(" + "|".join(map(re.escape, _INTERCEPTORS)) + r")\Z"), 0)
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


def _filename(frame: FrameType) -> str:
    return os.path.normcase(frame.f_code.co_filename)


def _is_dispatch(frame: FrameType) -> bool:
    """A frame that exists only because a torch function mode is active: the tool's, or torch's
    `handle_torch_function` (torch/overrides.py) that calls it."""
    name = _filename(frame)
    return name.startswith(TOOL_DIR) or os.path.basename(name) == "overrides.py"


def users_frame(start: FrameType | None, lineno: int, filename: str) -> FrameType | None:
    """The frame python would name for a warning an interceptor's frame (`filename` at `lineno`)
    was named for, walking up from `start` (the frame that warned): past the interceptors and
    torch's dispatch to them, and past the outer call of the function a mode called again (the
    same function, one frame in plain python)."""
    inner, frame = None, start
    while frame is not None and not (_filename(frame) == filename and frame.f_lineno == lineno):
        inner, frame = frame, frame.f_back
    while frame is not None and _is_dispatch(frame):
        frame = frame.f_back
    if frame is not None and inner is not None and frame.f_code is inner.f_code:
        frame = frame.f_back
    return frame


def _matches(pattern: Any, text: str) -> bool:
    if pattern is None:
        return True
    if isinstance(pattern, str):  # the C implementation's plain-text filters match exactly
        return pattern == text
    return bool(pattern.match(text))


def _action(category: type, text: str, module: str, lineno: int) -> str:
    """The action the warnings filters take, as `warnings.warn_explicit` finds it."""
    for action, message, cat, mod, line in warnings.filters:
        if (
            _matches(message, text)
            and issubclass(category, cat)
            and _matches(mod, module)
            and (line == 0 or line == lineno)
        ):
            return str(action)
    return str(warnings.defaultaction)


def _forget_first_pass(msg: Any, module: str) -> None:
    """Undo what the interceptor frame's pass recorded, so the user's pass decides as under python."""
    _no_registries()
    text = str(msg.message)
    if _action(msg.category, text, module, msg.lineno) == "once":
        warnings.onceregistry.pop((text, msg.category), None)  # type: ignore[attr-defined]


def _no_registries() -> None:
    for name in _INTERCEPTORS:
        module = sys.modules.get(name)
        if module is not None:
            vars(module)["__warningregistry__"] = None


def _reissue(msg: Any) -> None:
    filename = os.path.normcase(str(getattr(msg, "filename", "")))
    module = _FILES.get(filename)
    if module is None:
        _original(msg)
        return
    frame = users_frame(sys._getframe(1), msg.lineno, filename)
    if frame is None:
        _original(msg)
        return
    _forget_first_pass(msg, module)
    g = frame.f_globals
    warnings.warn_explicit(
        msg.message,
        msg.category,
        frame.f_code.co_filename,
        frame.f_lineno,
        module=g.get("__name__", "<string>"),
        registry=g.setdefault("__warningregistry__", {}),
        source=msg.source,
    )


def redirect() -> Callable[[], None]:
    """Start re-attributing (nested sessions share one hook); returns the undo."""
    global _installed, _original
    if _installed == 0:
        _original = warnings._showwarnmsg  # type: ignore[attr-defined]
        warnings._showwarnmsg = _reissue  # type: ignore[attr-defined]
        _no_registries()  # the interceptors' frames keep no registry
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
