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
from .births import BirthTag
from .blame import islands, majority, summary
from .names import expression_for
from .provenance import Provenance, short_path


def _outer_name(root: nn.Module, frames: list[FrameType]) -> tuple[str, FrameType] | None:
    """The user's name for `root` in the outermost frame that has one (not `self`, not a wrapper's
    parameter: a cast there would run on every call)."""
    for frame in reversed(frames):
        found = expression_for(root, [frame])
        if found is not None and found[0].split(".", 1)[0] != "self":
            return found
    return None


def _converted_from_outside(root: nn.Module, paths: list[str], prov: Provenance) -> bool:
    """Each part of `root` in the wanted dtype got it from a conversion the user's code made from
    outside the model's constructors (`model.stem.half()` in the script, a loader helper). A part
    the model's own `__init__` keeps in that dtype (an embedding stored in bf16 beside float32
    weights autocast runs) is the model's design: converting the rest would lower its intent."""
    for path in paths:
        param = next((p for p in root.get_submodule(path).parameters() if p.is_floating_point()), None)
        tag = prov.lookup(param) if param is not None else None
        user = getattr(tag, "user", None) if isinstance(tag, BirthTag) and tag.op else None
        if user is None or user[0].co_name == "__init__":
            return False
    return True


def whole_model_fix(
    root: nn.Module, want: torch.dtype, frames: list[FrameType], prov: Provenance
) -> Fix | None:
    """`model.to(want)` after the model is built, when the user's code converted part of `root` to
    `want` but most of its parameters are in another dtype; None otherwise (a model mostly in `want`
    whose other parameters may be kept wide on purpose is left to the per-tensor fixes)."""
    have = majority([root])
    converted = islands(root, want)
    if have is None or have == want or not converted or converted == [""]:
        return None
    if not _converted_from_outside(root, converted, prov):
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
