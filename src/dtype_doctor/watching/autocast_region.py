"""The autocast region's boundary as a dtype birth: a tensor autocast made half (a projector's Linear
under `with torch.autocast("cpu", dtype=torch.bfloat16):`) was given that dtype by the `with` line the
user wrote, not by the library line that ran the op. Found when a finding reads it, from the user's
live frames (the `with` statement around the line each runs) and the autocast dtype in force.
"""

from __future__ import annotations

from types import FrameType

import torch

from ..report import Origin
from .autocast_regions import region_at
from .provenance import short_path

_MAX_CHAIN = 32


def enclosing(frames: list[FrameType]) -> tuple[str, int, str] | None:
    """(file, line, the autocast call) of the innermost `with` (or decorator) entering autocast around
    a line one of the user's frames runs (innermost frame first): autocast_regions' reading."""
    for frame in frames:
        found = region_at(frame.f_code, frame.f_lineno)
        if found is not None:
            line, text = found
            return short_path(frame.f_code.co_filename), line, text.removeprefix("with ")
    return None


def _in_force(dtype: str | None) -> bool:
    """Autocast is on now, on some device, in `dtype`."""
    for device in ("cpu", "cuda"):
        try:
            if torch.is_autocast_enabled(device) and str(torch.get_autocast_dtype(device))[6:] == dtype:
                return True
        except (RuntimeError, TypeError, AttributeError):
            continue
    return False


def attach(origin: Origin, frames: list[FrameType]) -> None:
    """Give the earliest autocast-made origin in `origin`'s lineage (same dtype) the `with` line that
    chose its dtype, as its parent; nothing when no user frame runs inside such a `with`."""
    current, last = origin, None
    for _ in range(_MAX_CHAIN):
        if current.kind == "autocast":
            last = current
        nxt = next((c for c in current.chain if c.kind != "call" and c.dtype == current.dtype), None)
        if nxt is None:
            break
        current = nxt
    if last is None or not _in_force(last.dtype) or any(c.op == "torch.autocast" for c in last.chain):
        return
    found = enclosing(frames)
    if found is not None:
        file, line, source = found
        region = Origin(
            kind="autocast", name=source, op="torch.autocast", file=file, line=line, dtype=last.dtype
        )
        last.chain.insert(0, region)
