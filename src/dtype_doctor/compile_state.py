"""Is dynamo tracing the Python that runs now? Asked on every torch call by the tool's modes and hooks.

torch.compiler.is_compiling() costs a third of a no-op TorchFunctionMode call, so the hot paths ask
its two parts themselves. Dynamo answers True for is_dynamo_compiling() while it traces (a constant
in the traced code: a branch on it leaves nothing in the graph and no guard); the flag is held True
while it compiles (and exports).
"""

from __future__ import annotations

from typing import Any

import torch


class _NoFlag:
    _is_compiling_flag = False


is_dynamo_compiling: Any = getattr(torch.compiler, "is_dynamo_compiling", None)
compiler_flags: Any = torch.compiler if hasattr(torch.compiler, "_is_compiling_flag") else _NoFlag
if is_dynamo_compiling is None:  # another torch
    is_dynamo_compiling = getattr(torch.compiler, "is_compiling", lambda: False)


def compiling() -> bool:
    return is_dynamo_compiling() or compiler_flags._is_compiling_flag
