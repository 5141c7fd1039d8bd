"""The user's line: the innermost frame outside torch and dtype-doctor, and how it is shown; the
keyword arguments of a module call, for a global module hook."""

from __future__ import annotations

import os
import sys

import torch

_TOOL_DIRS = (os.path.dirname(os.path.dirname(__file__)), os.path.dirname(torch.__file__))


def user_line() -> tuple[str | None, int | None]:
    """(file, line) of the innermost frame outside torch and dtype-doctor (None, None if none)."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(_TOOL_DIRS) and not name.startswith("<frozen"):
            return name, frame.f_lineno
        frame = frame.f_back
    return None, None


def where(file: str | None, line: int | None, unknown: str = "an unknown line") -> str:
    """`file:line`, the file relative to the working directory when it lies under it."""
    if not file:
        return unknown
    inside = os.path.abspath(file).startswith(os.getcwd() + os.sep)
    return f"{os.path.relpath(file) if inside else file}:{line}"


def call_kwargs() -> dict:
    """The keyword arguments of the module call whose global hook runs (a local of torch's
    `Module._call_impl` and of its `inner`, the hooks' caller): global hooks are not given them."""
    f = sys._getframe(2)  # this, the hook, its caller
    for _ in range(4):
        if f is None:
            break
        if f.f_code.co_name in _CALLERS:
            kwargs = f.f_locals.get("kwargs")
            return kwargs if isinstance(kwargs, dict) else {}
        f = f.f_back
    return {}


_CALLERS = ("inner", "_call_impl")
