"""Live dtype diagnosis: `with watch(): ...` finds every mismatch with module, operands and origins."""

from __future__ import annotations

import sys
import types
from typing import Any

from ..errors import DtypeMismatchError
from .session import MODES, Session, watch

__all__ = ["MODES", "DtypeMismatchError", "Session", "watch"]


class _CallablePackage(types.ModuleType):
    """Importing this package sets `dtype_doctor.watch` to the package itself; calling it must
    still mean `watch(...)`, so `dtype_doctor.watch()` works whichever import came first."""

    def __call__(self, *args: Any, **kwargs: Any) -> Session:
        return watch(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
