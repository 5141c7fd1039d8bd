"""All families, gathered from the catalog's data modules (one module per area)."""

from __future__ import annotations

from .compare import COMPARE_FAMILIES
from .env import ENV_FAMILIES
from .errors import ERROR_FAMILIES
from .model import Family

FAMILIES: tuple[Family, ...] = (*ERROR_FAMILIES, *COMPARE_FAMILIES, *ENV_FAMILIES)
