"""The user's line: the innermost frame outside torch and dtype-doctor, and how it is shown."""

from __future__ import annotations

import os
import sys
from types import FrameType, ModuleType
from typing import Any

import torch

from ..remedies.places import Place
from ..tracing.files import TOOL_DIR, TORCH_DIR

_TOOL_DIRS = (TOOL_DIR, TORCH_DIR)


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


def place(file: str | None, line: int | None) -> Place | None:
    """The user's line as a remedy's place (`remedies.places`), its file shown as `where` shows it."""
    if not file or not line:
        return None
    return Place(where(file, line).rsplit(":", 1)[0], line)


def user_frames() -> list[FrameType]:
    """The frames outside torch and dtype-doctor on the stack, innermost first."""
    out: list[FrameType] = []
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(_TOOL_DIRS) and not name.startswith("<frozen"):
            out.append(frame)
        frame = frame.f_back
    return out


def held_expression(test: Any, frames: list[FrameType]) -> tuple[str, Any] | None:
    """(expression, value): the first object of the user's frames (innermost first) that `test`
    accepts, as the user's code reaches it: a variable (`opt`), else a public attribute of one
    (`self.optimizer`, `trainer.scaler`). Any kind of object: an optimizer, a scaler, a model."""
    for held in (False, True):
        for f in frames:
            for name, value in list(f.f_locals.items()) + list(f.f_globals.items()):
                if name.startswith("_") or not name.isidentifier():
                    continue
                if not held:
                    if _safe_test(test, value):
                        return name, value
                    continue
                if isinstance(value, torch.nn.Module | torch.Tensor | type | ModuleType):
                    continue
                try:
                    attrs = list(vars(value).items())[:200]
                except TypeError:  # no __dict__
                    continue
                for key, item in attrs:
                    if not key.startswith("_") and key.isidentifier() and _safe_test(test, item):
                        return f"{name}.{key}", item
    return None


def _safe_test(test: Any, value: Any) -> bool:
    try:
        return bool(test(value))
    except Exception:  # a user object whose comparison or attribute access raises
        return False
