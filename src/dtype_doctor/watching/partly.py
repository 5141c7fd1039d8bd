"""A model only partly converted to the precision asked for (`model.stem.half()`, a wrapper that casts
only the inputs): most of its parameters are still in another dtype, so a cast of the one odd tensor
that surfaced first (a `cls_token` met by `torch.cat`) fails at the next layer still in that dtype.
The group's one edit is the module-wide cast of the model, where the user's code has built it."""

from __future__ import annotations

from types import FrameType

import torch
from torch import nn

from .. import remedies
from ..catalog.shared_remedies import CONVERT_PARTLY
from ..remedies.places import after_built
from ..report import Fix
from .blame import islands, majority, summary
from .names import expression_for
from .provenance import short_path


def _outer_name(root: nn.Module, frames: list[FrameType]) -> tuple[str, FrameType] | None:
    """The user's name for `root` in the outermost frame that has one (not `self`, not a wrapper's
    parameter: a cast there would run on every call)."""
    for frame in reversed(frames):
        found = expression_for(root, [frame])
        if found is not None and found[0].split(".", 1)[0] != "self":
            return found
    return None


def whole_model_fix(root: nn.Module, want: torch.dtype, frames: list[FrameType]) -> Fix | None:
    """`model.to(want)` after the model is built, when `root` holds parameters in `want` (someone
    converted part of it) but most of them are in another dtype; None otherwise (a model mostly in
    `want` whose other parameters may be kept wide on purpose is left to the per-tensor fixes)."""
    have = majority([root])
    converted = islands(root, want)
    if have is None or have == want or not converted or converted == [""]:
        return None
    found = _outer_name(root, frames)
    if found is None:
        return None
    name, frame = found
    path = frame.f_code.co_filename
    line = after_built(path, name.split(".", 1)[0], frame.f_lineno)
    return remedies.make(
        CONVERT_PARTLY,
        file=short_path(path),
        line=line if line is not None else frame.f_lineno,
        model=name,
        paths=[""],
        want=str(want)[6:],
        have=str(have)[6:],
        converted=summary(converted),
    )
