"""Live dtype diagnosis: `with watch(): ...` finds every mismatch with module, operands and origins."""

from __future__ import annotations

from typing import Any

from ..errors import DtypeMismatchError

__all__ = ["MODES", "DtypeMismatchError", "Session", "watch"]


def __getattr__(name: str) -> Any:
    """watch, Session and MODES import torch: only when asked for (`run` imports torch when the
    program does, so what the program sets before `import torch` takes effect)."""
    if name in ("MODES", "Session", "watch"):
        from . import session

        return getattr(session, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
