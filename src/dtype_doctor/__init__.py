"""dtype-doctor: name, locate and fix PyTorch mixed-precision failures.

Public API only. Heavy pieces (torch) are imported lazily so that `explain` stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import report as _report
from .errors import DoctorError, DtypeMismatchError
from .report import Evidence, Finding, Fix, Location, Operand, Origin, Report, Severity

if TYPE_CHECKING:  # the lazy names below, typed for type checkers (never imported here at run time)
    from .checking.audit import audit
    from .checking.check import check
    from .checking.testing import assert_dtype_consistent
    from .comparing.api import compare
    from .comparing.attribution import to_precision
    from .env.facts import environment
    from .explaining.core import explain, explain_sources
    from .numerics import (
        NumericsMonitor,
        ScalerMonitor,
        find_fp32_set,
        keep_in_fp32,
        monitor_numerics,
        watch_scaler,
    )
    from .repair.fix import fix, guard
    from .watching.session import watch

__version__ = "0.1.0"

# name → module that defines it; imported on first use
_LAZY = {
    "assert_dtype_consistent": "checking.testing",
    "explain": "explaining",
    "explain_sources": "explaining",
    "check": "checking.check",
    "audit": "checking.audit",
    "fix": "repair.fix",
    "guard": "repair.fix",
    "watch": "watching",
    "NumericsMonitor": "numerics",
    "ScalerMonitor": "numerics",
    "find_fp32_set": "numerics",
    "keep_in_fp32": "numerics",
    "monitor_numerics": "numerics",
    "watch_scaler": "numerics",
    "compare": "comparing",
    "environment": "env.facts",
    "to_precision": "comparing.attribution",
}

__all__ = [
    "DoctorError",
    "DtypeMismatchError",
    "Evidence",
    "Finding",
    "Fix",
    "Location",
    "NumericsMonitor",
    "Operand",
    "Origin",
    "Report",
    "ScalerMonitor",
    "Severity",
    "assert_dtype_consistent",
    "audit",
    "check",
    "compare",
    "environment",
    "explain",
    "explain_sources",
    "find_fp32_set",
    "fix",
    "guard",
    "keep_in_fp32",
    "monitor_numerics",
    "to_precision",
    "watch",
    "watch_scaler",
]


def load_ipython_extension(shell: Any) -> None:
    """`%load_ext dtype_doctor`: the %%dtype_doctor cell magic (integrations/ipython.py, loaded now)."""
    from .integrations.ipython import load_ipython_extension as load

    load(shell)


def unload_ipython_extension(shell: Any) -> None:
    from .integrations.ipython import unload_ipython_extension as unload

    unload(shell)


def _display(kind: str) -> Any:
    def show(report: Report) -> Any:
        from .render import display  # rich and the HTML renderer load when a report is first shown

        return getattr(display, kind)(report)

    return show


_report.DISPLAY.update({kind: _display(kind) for kind in ("text", "rich", "html")})


def __dir__() -> list[str]:
    """The public names, the lazy ones (watch, check, fix, ...) included."""
    return sorted({*globals(), *__all__})


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'dtype_doctor' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
