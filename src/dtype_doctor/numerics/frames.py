"""The user's line: the innermost frame outside torch and dtype-doctor, and how it is shown."""

from __future__ import annotations

import os
import sys

import torch

from ..remedies.places import Place

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


def place(file: str | None, line: int | None) -> Place | None:
    """The user's line as a remedy's place (`remedies.places`), its file shown as `where` shows it."""
    if not file or not line:
        return None
    return Place(where(file, line).rsplit(":", 1)[0], line)
