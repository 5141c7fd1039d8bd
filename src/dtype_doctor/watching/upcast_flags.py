"""A model's own upcast switch left off: an attribute (or config entry) whose name says upcast/fp32,
False on the modules around an overflow, and the user's line that passes it.

Not named per library: any boolean attribute of the overflowing module or the modules around it whose
name holds `upcast`, `fp32` or `float32` (diffusers' `upcast_attention`, a `force_upcast`, an
`attn_fp32`). The user's call is replayed in a forked child with every such attribute set True; when
its outputs are then finite, the fix points at the keyword the user's code passes it with.
"""

from __future__ import annotations

import ast
import os
import re
from typing import Any

import torch
from torch import nn

from .. import remedies
from ..catalog.numerics import SET_UPCAST_FLAG
from ..numerics.opsource import source_tree
from ..report import Finding
from ..verifying import isolation
from .verify import Call

_FLAG = re.compile(r"upcast|fp32|float32")


def off_flags(ancestors: list[tuple[str, nn.Module]]) -> list[str]:
    """The names of the False upcast switches of the modules around the overflow, innermost first."""
    out: list[str] = []
    for _, module in ancestors:
        config = getattr(module, "config", None)
        items = [*vars(module).items(), *(config.items() if isinstance(config, dict) else ())]
        for name, value in items:
            if value is False and not name.startswith("_") and _FLAG.search(name) and name not in out:
                out.append(name)
    return out


def keyword_line(file: str, flag: str) -> int | None:
    """The line of the user's file that passes `flag=` to a call."""
    tree = source_tree(file)
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.keyword) and node.arg == flag:
            return node.value.lineno
    return None


def _finite_with(call: Call, flag: str, run: Any) -> bool:
    for module in call.module.modules():
        if vars(module).get(flag) is False:
            setattr(module, flag, True)
    try:
        got = run(call)
    except Exception:
        return False
    return bool(got) and all(bool(torch.isfinite(t).all()) for t in got)


def attach(f: Finding, ancestors: list[tuple[str, nn.Module]], call: Call, file: str, run: Any) -> None:
    """Add the set-the-switch advice, when a replay with it set is finite (second: the keep fix at the
    cast stays first, the one --write pastes)."""
    for flag in off_flags(ancestors):
        full = file if os.path.isabs(file) else os.path.abspath(file)
        line = keyword_line(full, flag)
        if line is None or not any(vars(m).get(flag) is False for m in call.module.modules()):
            continue
        outcome = isolation.in_child(lambda flag=flag: _finite_with(call, flag, run))
        if not outcome.value:
            continue
        fix = remedies.make(SET_UPCAST_FLAG, flag=flag, at=f"{file}:{line}")
        if fix is not None:  # advice (a keyword inside the user's call): replayed, not pasted
            f.fixes.insert(min(1, len(f.fixes)), fix)
        return
