"""All families, gathered from the catalog's data modules (one module per area)."""

from __future__ import annotations

from .audit import AUDIT_FAMILIES, FIX_FAMILIES
from .errors import ERROR_FAMILIES
from .model import Family

# First definition of a code wins: check's fallback defines "silent-promotion" until watch's catalog does.
FAMILIES: tuple[Family, ...] = tuple(
    {f.code: f for f in reversed((*ERROR_FAMILIES, *AUDIT_FAMILIES, *FIX_FAMILIES))}.values()
)[::-1]
