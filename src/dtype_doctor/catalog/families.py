"""All families, gathered from the catalog's data modules (one module per area)."""

from __future__ import annotations

from .audit import AUDIT_FAMILIES, FIX_FAMILIES
from .compare import COMPARE_FAMILIES
from .env import ENV_FAMILIES
from .errors import ERROR_FAMILIES
from .integrations import INTEGRATION_FAMILIES
from .model import Family
from .numerics import NUMERICS_FAMILIES
from .watch import WATCH_FAMILIES

FAMILIES: tuple[Family, ...] = (
    *ERROR_FAMILIES,
    *WATCH_FAMILIES,
    *AUDIT_FAMILIES,
    *FIX_FAMILIES,
    *NUMERICS_FAMILIES,
    *INTEGRATION_FAMILIES,
    *COMPARE_FAMILIES,
    *ENV_FAMILIES,
)
