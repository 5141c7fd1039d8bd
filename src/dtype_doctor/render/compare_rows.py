"""The CompareResult section as rows, once, for every view: the console table (tables.py), the HTML
tables and charts (views.py) and the PNG (png.py) draw what this module returns, so they share the
number formats, the column set, the row order and what counts as a speed-up.

A speed-up against fp32 is shown only when both timings are stable (`timing["unstable"]` is None,
compare's own verdict): otherwise the cell reads "unstable", never a number. No torch import.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..sections import CompareResult

NONE = "–"
UNSTABLE = "unstable"
LAYER_COLUMNS = ("precision", "module", "type", "error", "max abs", "note")
LAYERS_TITLE = "per-module error (each module fed the fp32 reference input)"


def finite(value: Any, scale: float = 1.0) -> float | None:
    """A finite number (times `scale`), else None (missing, NaN, inf, bool, text)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return value * scale


def fmt_num(x: Any, fmt: str = ".2g") -> str:
    if isinstance(x, bool) or not isinstance(x, int | float) or math.isnan(x):
        return NONE
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return format(x, fmt)


def fmt_bytes(n: Any) -> str:
    """Compact binary size: 512B, 3.2K, 41M, 1.5G."""
    if finite(n) is None:
        return NONE
    for unit in ("B", "K", "M", "G"):
        if abs(n) < 1024 or unit == "G":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.3g}{unit}"
        n /= 1024
    return f"{n:.3g}G"


def fmt_count(x: Any) -> str:
    if finite(x) is None:
        return NONE
    for unit in ("", "k", "M"):
        if abs(x) < 1000 or unit == "M":
            return f"{x:.3g}{unit}"
        x /= 1000
    return f"{x:.3g}M"


def _get(mapping: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(mapping, Mapping):
            return None
        mapping = mapping.get(key)
    return mapping


@dataclass(frozen=True)
class VariantRow:
    """One precision variant: the numbers the charts draw and the cells the tables show."""

    name: str
    status: str
    median_ms: float | None
    q1_ms: float | None
    q3_ms: float | None
    speedup: float | None  # None when either timing is missing or unstable
    speed_text: str
    peak_mib: float | None
    rel_l2: float | None  # as measured (inf when the output overflowed); charts use finite()
    cells: dict[str, str] = field(default_factory=dict)


def compare_columns(section: CompareResult, wide: bool = False) -> list[str]:
    """The table's columns; `wide` adds the weights' size, cosine and max abs error."""
    columns = ["precision", "status", "ms", "speed-up", "per s", "peak mem"]
    columns += ["weights"] if wide else []
    columns += ["error"] + (["cosine", "max abs"] if wide else [])
    columns += ["grad error", "scale"] if section.settings.get("train_step") else []
    return columns


def variants(section: CompareResult) -> list[Mapping[str, Any]]:
    return [v for v in section.variants if isinstance(v, Mapping)]


def _speed(v: Mapping[str, Any], ref: Mapping[str, Any] | None) -> tuple[float | None, str]:
    median = finite(_get(v, "timing", "median_s"))
    ref_median = finite(_get(ref, "timing", "median_s")) if ref is not None else None
    if not median or not ref_median:
        return None, NONE
    if _get(v, "timing", "unstable") or _get(ref, "timing", "unstable"):
        return None, UNSTABLE
    speed = ref_median / median
    return speed, f"{speed:.2f}×"


def variant_rows(section: CompareResult) -> list[VariantRow]:
    """One row per variant, in the order compare measured them."""
    items = variants(section)
    ref = next((v for v in items if v.get("name") == "fp32"), None)
    rows = []
    for v in items:
        timing = v.get("timing") if isinstance(v.get("timing"), Mapping) else {}
        median, q1, q3 = (finite(timing.get(k), 1e3) for k in ("median_s", "q1_s", "q3_s"))
        speed, speed_text = _speed(v, ref)
        err = v.get("error") if isinstance(v.get("error"), Mapping) else {}
        rel_l2 = err.get("rel_l2")
        half_iqr = (q3 - q1) / 2 if q1 is not None and q3 is not None else None
        cells = {
            "precision": str(v.get("name", "?")),
            "status": str(v.get("status", "")),
            "ms": f"{fmt_num(median, '.3g')} ±{fmt_num(half_iqr)}" if median is not None else NONE,
            "speed-up": speed_text,
            "per s": fmt_count(v.get("throughput_per_s")),
            "peak mem": fmt_bytes(v.get("peak_memory_bytes")),
            "weights": fmt_bytes(v.get("weights_bytes")),
            "error": fmt_num(rel_l2),
            "cosine": fmt_num(err.get("cosine"), ".5f"),
            "max abs": fmt_num(err.get("max_abs")),
            "grad error": fmt_num(_get(v, "grad_error", "rel_l2")),
            "scale": fmt_num(v.get("loss_scale"), ".0f"),
        }
        rows.append(
            VariantRow(
                name=cells["precision"],
                status=cells["status"],
                median_ms=median,
                q1_ms=q1,
                q3_ms=q3,
                speedup=speed,
                speed_text=speed_text,
                peak_mib=finite(v.get("peak_memory_bytes"), 1 / 2**20),
                rel_l2=rel_l2 if isinstance(rel_l2, int | float) and not isinstance(rel_l2, bool) else None,
                cells=cells,
            )
        )
    return rows


def compare_cells(section: CompareResult, wide: bool = False) -> tuple[list[str], list[list[str]]]:
    """(columns, rows of display strings): the comparison table every view shows."""
    columns = compare_columns(section, wide)
    return columns, [[row.cells[c] for c in columns] for row in variant_rows(section)]


def caption(section: CompareResult) -> str:
    s = section.settings
    return (
        f"ms: median of {s.get('repeats')} runs (fp32: twice, at the start and the end) after "
        f"{s.get('warmup')} warm-up ± half the interquartile range · speed-up: fp32's median over "
        f"the variant's, '{UNSTABLE}' when either timing is · error: ‖low − fp32‖/‖fp32‖ · "
        f"peak mem: {memory_method(section)}"
    )


def title(section: CompareResult) -> str:
    s = section.settings
    return f"compare on {s.get('device_name') or s.get('device')} · torch {s.get('torch')}"


def memory_method(section: CompareResult) -> str:
    methods = {v.get("memory_method") for v in variants(section) if v.get("memory_method")}
    if methods == {"cuda-allocator"}:
        return "CUDA allocator peak above the baseline"
    if methods == {"live-tensor-bytes"}:  # CPU: torch keeps no CPU allocator statistics
        return "weights + the first run's peak of live tensor bytes (CPU: tensors only)"
    return "process RSS sampled every 2 ms above the baseline (approximate)"


def worst_layers(section: CompareResult, top: int = 3) -> list[tuple[str, Mapping[str, Any]]]:
    """(variant name, layer) for the `top` modules that drift most in each variant that keeps
    nothing in fp32 (measured one module at a time; containers their child explains are left out)."""
    return [
        (str(v.get("name", "?")), layer)
        for v in variants(section)
        if not v.get("keep_fp32")
        for layer in [
            x for x in v.get("layers") or [] if isinstance(x, Mapping) and not x.get("explained_by")
        ][:top]
    ]


def layer_cells(section: CompareResult, top: int = 3) -> list[list[str]]:
    """Rows of the per-module table (columns: LAYER_COLUMNS)."""
    rows = []
    for name, layer in worst_layers(section, top):
        note = str(layer.get("failed") or "")[:70] or (
            "input out of range"
            if layer.get("input_overflow")
            else "non-finite"
            if layer.get("nonfinite")
            else ""
        )
        rows.append(
            [
                name,
                str(layer.get("module", "")),
                str(layer.get("module_type", "")),
                fmt_num(layer.get("rel_l2")),
                fmt_num(layer.get("max_abs")),
                note,
            ]
        )
    return rows
