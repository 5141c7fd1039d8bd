"""The autocast region's boundary as a dtype birth: a tensor autocast made half (a projector's Linear
under `with torch.autocast("cpu", dtype=torch.bfloat16):`) was given that dtype by the `with` line the
user wrote, not by the library line that ran the op. Found when a finding reads it, from the user's
live frames (the `with` statement around the line each runs) and the autocast dtype in force.
"""

from __future__ import annotations

import ast
from types import FrameType

import torch

from ..numerics.opsource import source_tree
from ..report import Origin
from .provenance import short_path

_MAX_CHAIN = 32


def _autocast_items(node: ast.With | ast.AsyncWith) -> list[str]:
    """The sources of the `with` items that enter autocast (`torch.autocast(...)`,
    `torch.cuda.amp.autocast(...)`, `autocast(...)`), not those that turn it off."""
    out = []
    for item in node.items:
        call = item.context_expr
        if not isinstance(call, ast.Call):
            continue
        name = ast.unparse(call.func)
        off = any(
            k.arg == "enabled" and isinstance(k.value, ast.Constant) and k.value.value is False
            for k in call.keywords
        )
        if name.rsplit(".", 1)[-1] == "autocast" and not off:
            out.append(ast.unparse(call))
    return out


def enclosing(frames: list[FrameType]) -> tuple[str, int, str] | None:
    """(file, line, the autocast call) of the innermost `with` entering autocast around a line one of
    the user's frames runs (innermost frame first)."""
    for frame in frames:
        tree = source_tree(frame.f_code.co_filename)
        line = frame.f_lineno
        best = None
        for node in ast.walk(tree) if tree is not None else ():
            if not isinstance(node, (ast.With, ast.AsyncWith)) or not node.body:
                continue
            end = max(s.end_lineno or s.lineno for s in node.body)
            inside = node.body[0].lineno <= line <= end and (best is None or node.lineno > best.lineno)
            if inside and _autocast_items(node):
                best = node
        if best is not None:
            return short_path(frame.f_code.co_filename), best.lineno, _autocast_items(best)[0]
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
