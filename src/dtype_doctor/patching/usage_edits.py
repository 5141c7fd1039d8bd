"""Edits for findings about how a tool is used rather than a tensor's dtype: a redundant autocast
around a model already in half precision, gradients clipped while still scaled. No torch import."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..editing import finders as find
from ..editing.source import Edit, add_kwarg
from ..report import Finding
from .candidates import Candidate

if TYPE_CHECKING:
    from .plan import Planner


# ---- an autocast around a model that is already half -------------------------------------
def autocast(planner: Planner, f: Finding) -> Iterator[Candidate]:
    site = planner.call_site(f)
    if site is None:
        return
    src, line = site
    found = find.autocast_with(src, line)
    if found is None:
        return
    with_node, item = found
    where = f"{src.path}:{with_node.lineno}"
    yield Candidate(
        f"remove the redundant torch.autocast around the half model ({where})",
        [find.remove_with_item(src, with_node, item)],
    )
    edit = add_kwarg(src, item.context_expr, "enabled", "False")
    if edit is not None:
        yield Candidate(f"disable the torch.autocast around the half model ({where})", [edit])


# ---- clip_grad_norm_ on scaled gradients ---------------------------------------------------
def unscale_before_clip(planner: Planner, f: Finding) -> Iterator[Candidate]:
    """Move the clip after the loop's `scaler.unscale_(opt)`, else add that call before the clip."""
    loc = f.location
    src = planner.source(loc.file if loc else None)
    if src is None or loc is None or loc.line is None:
        return
    clip = find.scope_statement(src, loc.line, innermost_block=True)
    block = find.block_of(src, clip)
    if clip is None or block is None:
        return
    after = block[block.index(clip) + 1 :]
    where = f"{src.path}:{clip.lineno}"
    unscale = next((s for s in after if find.calls_method(s, "unscale_")), None)
    if unscale is not None:
        start, end = src.offset(clip.lineno, 0), src.offset((clip.end_lineno or clip.lineno) + 1, 0)
        at = src.offset((unscale.end_lineno or unscale.lineno) + 1, 0)
        moved = src.text[start:end]
        yield Candidate(
            f"clip after scaler.unscale_ ({where})",
            [Edit(src.path, start, end, ""), Edit(src.path, at, at, moved)],
        )
        return
    step = next((c for s in after for c in find.method_calls(s, "step") if c.args), None)
    if step is not None and isinstance(step.func, ast.Attribute):
        scaler, optimizer = src.segment(step.func.value), src.segment(step.args[0])
        yield Candidate(
            f"unscale the gradients before clipping ({where})",
            [find.insert_before(src, clip.lineno, f"{scaler}.unscale_({optimizer})", block_level=True)],
        )
