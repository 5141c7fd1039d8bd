"""Live dtype diagnosis: `with watch(): ...` finds every mismatch with module, operands and origins."""

from __future__ import annotations

from ..errors import DtypeMismatchError
from .session import MODES, Session, watch

__all__ = ["MODES", "DtypeMismatchError", "Session", "watch"]
