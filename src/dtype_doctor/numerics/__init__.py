"""numerics: value ranges, the first producer of inf/NaN (forward and backward), GradScaler health.

from dtype_doctor.numerics import monitor_numerics
with monitor_numerics(model) as mon:
    model(x)
print(mon.report.codes())
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..repair.keep import KeepFp32, keep_in_fp32
from .fp32_set import find_fp32_set
from .monitor import NumericsMonitor
from .scaler import ScalerMonitor, watch_scaler

__all__ = [
    "KeepFp32",
    "NumericsMonitor",
    "ScalerMonitor",
    "find_fp32_set",
    "keep_in_fp32",
    "monitor_numerics",
    "watch_scaler",
]


@contextmanager
def monitor_numerics(
    model: Any = None, every: int = 1, report: Any = None, **options: Any
) -> Iterator[NumericsMonitor]:
    """Monitor `model` (or the first module called) inside the block; findings in `.report`."""
    monitor = NumericsMonitor(report=report, model=model, every=every, **options).start()
    try:
        yield monitor
    finally:
        monitor.stop()
