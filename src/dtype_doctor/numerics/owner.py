"""The module an op-level problem belongs to, read from the frames: the one whose method ran the op.

An op can run where no forward is on the stack: in a module's `__init__` (a cos/sin cache built
while the model is constructed) or in a module called on its own before its model is (a rotary
table computed for a reference). The module is then the `self` of the innermost method on the
stack; while it is being built it has no path yet, so its path is read from the constructors
around it: `self.rotary_emb = RotaryEmbedding(...)` in the parent's `__init__` names it
`rotary_emb`.
"""

from __future__ import annotations

import linecache
import re
from types import FrameType
from typing import Any

from torch import nn

_MAX_FRAMES = 48
_SELF_ATTRIBUTE = re.compile(r"^\s*self\.([A-Za-z_]\w*)\s*(?::[^=]*)?=(?!=)")


def _self_module(frame: FrameType) -> nn.Module | None:
    code = frame.f_code
    if not code.co_argcount or code.co_varnames[0] != "self":
        return None
    value = frame.f_locals.get("self")
    return value if isinstance(value, nn.Module) else None


def _assigned_attribute(frame: FrameType) -> str | None:
    """`x` when the frame's line is `self.x = ...`."""
    found = _SELF_ATTRIBUTE.match(linecache.getline(frame.f_code.co_filename, frame.f_lineno))
    return found.group(1) if found else None


def owner(frame: FrameType | None) -> tuple[nn.Module | None, str | None]:
    """(the module whose method runs at `frame` or outside it, its path while it is being built:
    the `self.<name> = ...` targets of the constructors around it, outermost first; None when it is
    not being built or a step has no such name)."""
    found: nn.Module | None = None
    parts: list[str] = []
    inner: nn.Module | None = None
    building = True
    for _ in range(_MAX_FRAMES):
        if frame is None:
            break
        module = _self_module(frame)
        if module is not None:
            if found is None:
                found = inner = module
            elif module is not inner:
                if frame.f_code.co_name != "__init__":
                    break
                name = _assigned_attribute(frame)
                if name is None:
                    building = False
                    break
                parts.append(name)
                inner = module
        elif found is not None:
            break
        frame = frame.f_back
    return found, ".".join(reversed(parts)) if building and parts else None


def late_name(module: Any, built_as: str | None, name_of: Any, current: str | None) -> str | None:
    """The module's name once the run is over (its path in the outermost model called by then);
    its construction path when that names nothing better; else `current`."""
    name = None
    if module is not None and name_of is not None:
        try:
            name = name_of(module)
        except Exception:
            name = None
    if name and name != type(module).__name__:
        return name
    return built_as or current
