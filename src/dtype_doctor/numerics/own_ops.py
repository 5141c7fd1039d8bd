"""The tool's own tensor ops (statistics rows, finiteness flags, float32 re-runs) kept out of the
user's modes: no torch function mode sees them (the watch would take them for the user's), and the
user's own dispatch modes (a FlopCounterMode, an op counter, a tracer) are set aside around them, so
what those modes count is what the program computes, as under plain python. A mode that measures
the tool itself (tests/op_counting.py) says so with a true `sees_dtype_doctor` attribute.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import _disable_current_modes, _get_current_dispatch_mode_stack


def _users_modes() -> bool:
    """A dispatch mode is on, and one of them is the user's (not one measuring the tool)."""
    if not torch._C._len_torch_dispatch_stack():
        return False
    return not all(getattr(m, "sees_dtype_doctor", False) for m in _get_current_dispatch_mode_stack())


class own_ops:
    __slots__ = ("_dispatch", "_function")

    def __enter__(self) -> None:
        self._function = torch._C.DisableTorchFunction()
        self._function.__enter__()
        self._dispatch = _disable_current_modes() if _users_modes() else None
        if self._dispatch is not None:
            self._dispatch.__enter__()

    def __exit__(self, *exc: Any) -> None:
        if self._dispatch is not None:
            self._dispatch.__exit__(*exc)
        self._function.__exit__(*exc)


class user_dispatch_aside:
    """The user's dispatch modes only, set aside (inside a TorchFunctionMode's own handler)."""

    __slots__ = ("_dispatch",)

    def __enter__(self) -> None:
        self._dispatch = _disable_current_modes() if _users_modes() else None
        if self._dispatch is not None:
            self._dispatch.__enter__()

    def __exit__(self, *exc: Any) -> None:
        if self._dispatch is not None:
            self._dispatch.__exit__(*exc)
