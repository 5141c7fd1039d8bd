"""Measuring one precision variant: tensors in outputs, error against a reference, time, memory.

Used by `compare`. Everything here is device-agnostic: CUDA paths (synchronize, allocator
peaks) run when the tensors live on a CUDA device, the CPU paths otherwise.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from ..tensors import float_tensors

# ---------------------------------------------------------------------------------------------
# error against the fp32 reference


@dataclass
class ErrorStats:
    """Error of a low-precision result against the fp32 reference, over all float tensors.

    max_rel is elementwise |d| / (|ref| + floor), the floor being 1e-3 × the reference's RMS so
    that near-zero reference values do not dominate; rel_l2 is ‖d‖ / ‖ref‖.
    """

    max_abs: float
    max_rel: float
    rel_l2: float
    cosine: float
    nonfinite: int = 0
    numel: int = 0

    def to_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)


def error_stats(low: Any, ref: Any) -> ErrorStats | None:
    """Compare every float tensor of `low` with the same path in `ref`; None if nothing matches."""
    ref_map = dict(float_tensors(ref))
    pairs = [(t, ref_map[p]) for p, t in float_tensors(low) if p in ref_map]
    pairs = [(a, b) for a, b in pairs if a.shape == b.shape]
    if not pairs:
        return None
    a = torch.cat([x.detach().reshape(-1).to("cpu", torch.float64) for x, _ in pairs])
    b = torch.cat([y.detach().reshape(-1).to("cpu", torch.float64) for _, y in pairs])
    return _stats(a, b)


def _stats(a: torch.Tensor, b: torch.Tensor) -> ErrorStats:
    finite = torch.isfinite(a)
    nonfinite = int((~finite).sum())
    if a.numel() == 0:
        return ErrorStats(0.0, 0.0, 0.0, 1.0, 0, 0)
    if nonfinite:
        return ErrorStats(math.inf, math.inf, math.inf, math.nan, nonfinite, a.numel())
    d = (a - b).abs()
    rms = float(b.pow(2).mean().sqrt())
    floor = max(rms * 1e-3, 1e-30)
    ref_norm = float(b.norm())
    rel_l2 = float(d.norm()) / ref_norm if ref_norm > 0 else (0.0 if float(d.norm()) == 0 else math.inf)
    denom = float(a.norm()) * ref_norm
    cosine = float((a * b).sum()) / denom if denom > 0 else (1.0 if float(d.max()) == 0 else 0.0)
    return ErrorStats(
        max_abs=float(d.max()),
        max_rel=float((d / (b.abs() + floor)).max()),
        rel_l2=rel_l2,
        cosine=cosine,
        nonfinite=0,
        numel=a.numel(),
    )


def grad_error_stats(low: Mapping[str, torch.Tensor], ref: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    """Error over all parameter gradients, plus the parameter whose gradient drifts most."""
    names = [n for n in ref if n in low and low[n].shape == ref[n].shape]
    if not names:
        return {}
    a = torch.cat([low[n].reshape(-1).to("cpu", torch.float64) for n in names])
    b = torch.cat([ref[n].reshape(-1).to("cpu", torch.float64) for n in names])
    out: dict[str, Any] = _stats(a, b).to_dict()
    worst, worst_err = None, -1.0
    for n in names:
        err = _stats(low[n].reshape(-1).to("cpu", torch.float64), ref[n].reshape(-1).to("cpu", torch.float64))
        if err.rel_l2 > worst_err:
            worst, worst_err = n, err.rel_l2
    out["worst_param"] = worst
    out["worst_param_rel_l2"] = worst_err
    return out


# ---------------------------------------------------------------------------------------------
# time


UNSTABLE_SPREAD = 0.3  # IQR wider than this share of the median: too noisy for a speed claim
UNSTABLE_DRIFT = 1.5  # the same runs this much slower/faster when timed again: the load changed


@dataclass
class Timing:
    """Latencies of repeated runs, in seconds; honest about spread.

    `drift`: median when timed again later / median at first (None when timed once).
    """

    samples: list[float] = field(default_factory=list)
    drift: float | None = None

    @property
    def median(self) -> float:
        return statistics.median(self.samples) if self.samples else math.nan

    @property
    def iqr(self) -> tuple[float, float]:
        if len(self.samples) < 2:
            return (self.median, self.median)
        q = statistics.quantiles(self.samples, n=4, method="inclusive")
        return (q[0], q[2])

    @property
    def spread(self) -> float:
        lo, hi = self.iqr
        return (hi - lo) / self.median if self.samples and self.median > 0 else math.nan

    @property
    def unstable(self) -> str | None:
        """Why these numbers cannot back a speed claim, or None when they can."""
        if not self.samples or not self.median > 0:
            return "no timing"
        if self.spread > UNSTABLE_SPREAD:
            return f"IQR {self.spread:.0%} of the median"
        if self.drift is not None and max(self.drift, 1 / self.drift) > UNSTABLE_DRIFT:
            return f"{max(self.drift, 1 / self.drift):.1f}× apart when timed again"
        return None

    def to_dict(self) -> dict[str, Any]:
        lo, hi = self.iqr
        return {
            "median_s": self.median,
            "q1_s": lo,
            "q3_s": hi,
            "min_s": min(self.samples) if self.samples else math.nan,
            "max_s": max(self.samples) if self.samples else math.nan,
            "repeats": len(self.samples),
            "spread": self.spread,
            "drift": self.drift,
            "unstable": self.unstable,
        }


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "xpu" and hasattr(torch, "xpu"):
        torch.xpu.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def time_runs(fn: Callable[[], Any], device: torch.device, warmup: int, repeats: int) -> Timing:
    """Wall times of `fn` after `warmup` untimed calls; the device is synchronised after each.

    As timeit does, the garbage collector is run first and kept off while timing: otherwise
    a collection of an earlier variant's cyclic garbage (whole models) lands in a timed run.
    """
    for _ in range(warmup):
        fn()
    synchronize(device)
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    timing = Timing()
    try:
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            synchronize(device)
            timing.samples.append(time.perf_counter() - start)
    finally:
        if was_enabled:
            gc.enable()
    return timing


def tensor_bytes(module: torch.nn.Module) -> int:
    """Exact bytes of a module's parameters and buffers."""
    seen: set[int] = set()
    total = 0
    for t in [*module.parameters(), *module.buffers()]:
        if id(t) not in seen:
            seen.add(id(t))
            total += t.numel() * t.element_size()
    return total
