"""The user's lines a watched finding's fixes are pasted at (`remedies.places`), read off the live
frames while the failing op runs: where the odd tensor has the user's name, the user's call of the
model, the statement after the model was built and converted, the tensor's birth, the backward."""

from __future__ import annotations

from types import FrameType
from typing import Any

from ..remedies.places import (
    BIRTH,
    CALL,
    INPUT,
    LOSS,
    MODEL,
    OP,
    Place,
    after_built,
    backward_line,
    statement_line,
)
from ..report import Origin
from .names import expression_for, user_frames
from .provenance import short_path


def _at(frame: FrameType) -> Place:
    path = frame.f_code.co_filename
    return Place(short_path(path), statement_line(path, frame.f_lineno))


def _holding(t: Any, name: str | None, frames: list[FrameType]) -> FrameType | None:
    """The innermost user frame whose local `name` is `t` (a plain name, not an attribute path)."""
    if t is None or not name or not name.isidentifier():
        return None
    return next((f for f in frames if f.f_locals.get(name) is t), None)


def collect(
    *,
    tensor: Any,
    variable: str | None,
    frames: list[FrameType],
    rooted: tuple[str, FrameType] | None,
    origin: Origin | None,
    op_frame: FrameType | None = None,
) -> dict[str, Place]:
    """The places known for a finding, by kind (none of them when the user's frames are unknown).

    tensor, variable: the odd operand and the user's name for it; frames: the user's frames,
    innermost first; rooted: the user's expression for the model and the frame that calls it;
    origin: the odd operand's origin (its birth); op_frame: the user's frame running the op."""
    places: dict[str, Place] = {}
    holder = _holding(tensor, variable, frames)
    if rooted is not None:
        places[CALL] = _at(rooted[1])
    if holder is not None:
        places[INPUT] = _at(holder)
    elif rooted is not None and variable:
        places[INPUT] = places[CALL]  # the argument the user wrote in the call
    if rooted is not None:
        base = rooted[0].split(".", 1)[0]
        path = rooted[1].f_code.co_filename
        line = after_built(path, base, places[CALL].line) if base != "self" else None
        if line is not None:
            places[MODEL] = Place(places[CALL].file, line)
    if origin is not None and origin.file and origin.line:
        places[BIRTH] = Place(origin.file, origin.line)
    if op_frame is not None:
        places[OP] = _at(op_frame)
    script = frames[-1] if frames else None
    if script is not None:
        path = script.f_code.co_filename
        line = backward_line(path, script.f_lineno)
        if line is not None:
            places[LOSS] = Place(short_path(path), line)
    return places


def of_root(root: Any) -> dict[str, Any] | None:
    """While the user's code calls `root`: the user's name for it (`model`) and the places of the
    fixes made for it (`places`), as `remedies` take them; None when no user frame reaches it."""
    frames = user_frames(2)
    rooted = expression_for(root, frames)
    if rooted is None:
        return None
    places = collect(tensor=None, variable=None, frames=frames, rooted=rooted, origin=None)
    return {"model": rooted[0], "places": places} if rooted[0] != "self" else {"places": places}
