"""dtype-doctor: name, locate and fix PyTorch mixed-precision failures.

Public API only. Heavy pieces (torch) are imported lazily so that `explain` stays light.
"""

from __future__ import annotations

from typing import Any

from .errors import DoctorError, DtypeMismatchError
from .report import Evidence, Finding, Fix, Location, Operand, Origin, Report, Severity

__version__ = "0.1.0"

# name → module that defines it; imported on first use
_LAZY = {
    "explain": "explain",
    "compare": "compare",
    "environment": "env",
    "to_precision": "attribution",
}

__all__ = [
    "DoctorError",
    "DtypeMismatchError",
    "Evidence",
    "Finding",
    "Fix",
    "Location",
    "Operand",
    "Origin",
    "Report",
    "Severity",
    "compare",
    "environment",
    "explain",
    "to_precision",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'dtype_doctor' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
