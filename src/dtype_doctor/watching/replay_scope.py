"""Whether a fix can be replayed by running it in the user's scope before the replayed call: not
when its place is code the call itself runs (a `forward` statement, or any line of a scope that is
itself inside the call). The live back-end (verify.py) then says so instead of running it in the
wrong place; only a re-run of the patched program runs such a fix."""

from __future__ import annotations

import os
import types
from typing import Any

from torch import nn

from ..report import Fix


def pasted_elsewhere(fix: Fix, scope: types.FrameType | None, module: nn.Module | None = None) -> str | None:
    """Why a fix placed where the replayed call runs it (a `forward` statement: a line of the scope's
    file in no code of the scope or of the frames that called it; or any line of a scope that is
    itself inside the call of `module`) cannot be replayed by running it in the scope before the
    call; None when it can (its place runs before the call: the scope, a function around it)."""
    if scope is None or not fix.file or not fix.line:
        return None
    file = os.path.normpath(fix.file)  # as reports show it: relative to the working directory of the run
    if not _same_file(scope.f_code.co_filename, file):
        return None
    frame: types.FrameType | None = scope
    while frame is not None:  # the scope and its callers: code that runs before the replayed call
        code = frame.f_code
        if _same_file(code.co_filename, file) and any(line == fix.line for _, _, line in code.co_lines()):
            break
        frame = frame.f_back
    if frame is not None and not _inside_call(scope, module):
        return None
    return f"pasted at {fix.file}:{fix.line}, inside the replayed call: only a re-run of the patched program runs it"


def _same_file(filename: str, file: str) -> bool:
    return filename == file or filename.endswith(os.sep + file)


def _inside_call(scope: types.FrameType, module: nn.Module | None) -> bool:
    """The scope's frame ran inside a call of `module` (a frame below it has it as `self`)."""
    frame = scope.f_back
    while frame is not None and module is not None:
        if frame.f_locals.get("self") is module:
            return True
        frame = frame.f_back
    return False


def other_model(names: set[str], env: dict[str, Any], module: Any, used: set[str]) -> str | None:
    """A model among the snippet's `names` that the replayed call of `module` neither runs, nor reads
    in its arguments (`used`), nor is held in, when no name the snippet uses is one it runs:
    `text_encoder_2.to(...)` replayed on the UNet's call changes nothing the call receives."""
    held = {id(m) for m in module.modules()} if isinstance(module, nn.Module) else set()
    models = {n: v for n in names if isinstance(v := env.get(n), nn.Module)}
    if not models or any(id(v) in held for v in models.values()):
        return None
    if any(id(module) in {id(m) for m in v.modules()} for v in models.values()):
        return None  # a model holding the call's (the pipeline's text encoder beside its UNet)
    if set(models) & used:
        return None
    return min(models)
