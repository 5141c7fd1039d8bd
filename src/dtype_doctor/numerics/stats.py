"""Range statistics of a tensor, computed on its device with no host sync.

One row per tensor: [abs-max, smallest non-zero magnitude, count below the smallest normal
(non-zero), count of zeros, signed max]. Rows are stacked and read once per step (`read_rows`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch

from ..tensors import iter_tensors

ABSMAX, MIN_NONZERO, N_TINY, N_ZERO, MAX = range(5)

FP16_MAX = 65504.0
FP16_TINY = 6.103515625e-05  # smallest normal float16
BF16_MAX = 3.3895313892515355e38


# Tensors in fp32/fp64 are measured against float16's smallest normal, so a float32 run also says
# how much of it would underflow in float16; low-precision tensors against their own.
_TINY_FOR = {
    torch.float16: FP16_TINY,
    torch.bfloat16: float(torch.finfo(torch.bfloat16).smallest_normal),
    torch.float32: FP16_TINY,
    torch.float64: FP16_TINY,
}


def tiny_threshold(dtype: torch.dtype) -> float:
    return _TINY_FOR.get(dtype, float(torch.finfo(dtype).smallest_normal))


def measurable(x: object) -> bool:
    return isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel() > 0 and not x.is_meta


@torch.no_grad()
def tensor_stats(x: torch.Tensor, signed: bool = False) -> torch.Tensor:
    """A float32 row [absmax, min_nonzero, n_tiny, n_zero, max] on x's device; no sync.

    NaN anywhere makes absmax NaN, an inf makes it inf, so finiteness needs no extra pass.
    The signed max costs one more pass and is only computed when asked (`signed`), to tell an
    additive attention mask (-inf only) from an overflow; otherwise it repeats absmax.
    """
    a = x.detach().abs()
    absmax = a.amax()
    top = x.detach().amax() if signed else absmax
    n_zero = a.numel() - torch.count_nonzero(a)  # NaN counts as non-zero
    n_tiny = torch.count_nonzero(a < tiny_threshold(x.dtype)) - n_zero
    min_nonzero = torch.where(a > 0, a, math.inf).amin()
    return torch.stack((absmax.float(), min_nonzero.float(), n_tiny.float(), n_zero.float(), top.float()))


@torch.no_grad()
def light_stats(x: torch.Tensor) -> torch.Tensor:
    """Only the abs-max (one fused pass, no temporary), for big tensors where range is all we need.

    The other columns are NaN (unknown), which `is_light` tells; finiteness still shows in abs-max.
    """
    absmax = torch.linalg.vector_norm(x.detach(), ord=math.inf).float()
    unknown = torch.full((), math.nan, device=x.device)
    return torch.stack((absmax, unknown, unknown, unknown, absmax))


def is_light(row: list[float]) -> bool:
    return math.isnan(row[N_ZERO])


def read_rows(rows: list[torch.Tensor]) -> list[list[float]]:
    """All rows to Python floats: one device→host transfer per device."""
    if not rows:
        return []
    devices = {r.device for r in rows}
    if len(devices) == 1:
        return torch.stack(rows).tolist()
    out: list[list[float]] = [[]] * len(rows)
    for device in devices:
        idx = [i for i, r in enumerate(rows) if r.device == device]
        for i, values in zip(idx, torch.stack([rows[i] for i in idx]).tolist(), strict=True):
            out[i] = values
    return out


def measured_tensors(obj: Any) -> Iterator[torch.Tensor]:
    """Floating tensors in a module's inputs or outputs, three containers deep at most."""
    return (t for t in iter_tensors(obj, max_depth=3) if measurable(t))


def fmt(value: float) -> str:
    """Short human form of a magnitude: 6.6e+04, inf, nan, 0."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf"
    if value == 0:
        return "0"
    return f"{value:.3g}" if 1e-3 <= abs(value) < 1e4 else f"{value:.2e}"
