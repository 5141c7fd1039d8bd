"""Whether a fix can be replayed by running it in the user's scope before the replayed call: not
when its place is code the call itself runs (a `forward` statement, or any line of a scope that is
itself inside the call). The live back-end (verify.py) then says so instead of running it in the
wrong place; only a re-run of the patched program runs such a fix."""

from __future__ import annotations

import os
import types

from torch import nn

from ..report import Fix


def pasted_elsewhere(fix: Fix, scope: types.FrameType | None, module: nn.Module | None = None) -> str | None:
    """Why a fix placed in the scope's file where the replayed call runs it (outside the scope's own
    code, a `forward` statement; or anywhere in a scope that is itself inside the call of `module`)
    cannot be replayed by running it in the scope before the call; None when it can."""
    if scope is None or not fix.file or not fix.line:
        return None
    code = scope.f_code
    file = os.path.normpath(fix.file)  # as reports show it: relative to the working directory of the run
    if code.co_filename != file and not code.co_filename.endswith(os.sep + file):
        return None
    if any(line == fix.line for _, _, line in code.co_lines()) and not _inside_call(scope, module):
        return None
    return f"pasted at {fix.file}:{fix.line}, inside code the replayed call runs: only a re-run of the patched program runs it"


def _inside_call(scope: types.FrameType, module: nn.Module | None) -> bool:
    """The scope's frame ran inside a call of `module` (a frame below it has it as `self`)."""
    frame = scope.f_back
    while frame is not None and module is not None:
        if frame.f_locals.get("self") is module:
            return True
        frame = frame.f_back
    return False
