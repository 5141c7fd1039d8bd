"""What one precision variant measured."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..dtypes import dtype_name
from ..report import Finding
from .attribution import LayerError, rank
from .measure import ErrorStats, Timing
from .precision import Precision


@dataclass
class VariantResult:
    precision: Precision
    status: str = "ok"  # ok | overflows | fails | out-of-memory
    timing: Timing | None = None
    peak_bytes: int | None = None
    memory_method: str = ""
    weights_bytes: int | None = None
    error: ErrorStats | None = None
    grad_error: dict[str, Any] = field(default_factory=dict)
    loss_scale: float | None = None
    throughput: float | None = None
    failure: str | None = None
    nonfinite_module: tuple[str, str] | None = None
    findings: list[Finding] = field(default_factory=list)
    layers: list[LayerError] = field(default_factory=list)
    keep_strategy: str | None = None
    # on a low-precision row: each keep-in-fp32 set measured for it, best first
    # ({"keep": [...], "error": float | None, "status": str, "helps": bool})
    keep_search: list[dict[str, Any]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.precision.name

    @property
    def median(self) -> float:
        return self.timing.median if self.timing and self.timing.samples else math.nan

    def to_dict(self) -> dict[str, Any]:
        p = self.precision
        return {
            "name": p.name,
            "dtype": dtype_name(p.dtype),
            "autocast": p.autocast,
            "keep_fp32": list(p.keep),
            "keep_strategy": self.keep_strategy,
            "status": self.status,
            "failure": self.failure,
            "nonfinite_module": list(self.nonfinite_module) if self.nonfinite_module else None,
            "timing": self.timing.to_dict() if self.timing else None,
            "throughput_per_s": self.throughput,
            "peak_memory_bytes": self.peak_bytes,
            "memory_method": self.memory_method,
            "weights_bytes": self.weights_bytes,
            "error": self.error.to_dict() if self.error else None,
            "grad_error": self.grad_error or None,
            "loss_scale": self.loss_scale,
            "keep_search": self.keep_search or None,
            # ranked modules first, then the containers their children explain (explained_by set)
            "layers": [layer.to_dict() for layer in rank(self.layers)[:20]]
            + [layer.to_dict() for layer in self.layers if layer.explained_by][:20],
        }
