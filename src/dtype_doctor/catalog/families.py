"""All families, gathered from the catalog's data modules (one module per area)."""

from __future__ import annotations

from .errors import ERROR_FAMILIES
from .model import Family
from .numerics import NUMERICS_FAMILIES

FAMILIES: tuple[Family, ...] = (*ERROR_FAMILIES, *NUMERICS_FAMILIES)
