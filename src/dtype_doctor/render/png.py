"""A PNG of a comparison: latency with its spread and speed-up, peak memory, error, the worst modules.

matplotlib is optional (`pip install dtype-doctor[plot]`); it is imported only here.
"""

from __future__ import annotations

import math
import os
from typing import Any

from ..errors import DoctorError
from ..sections import CompareResult
from .compare_rows import finite, variant_rows, worst_layers

_COLORS = {"ok": "#4C72B0", "overflows": "#DD8452", "fails": "#C44E52", "out-of-memory": "#C44E52"}


def plot_compare(section: CompareResult, path: str) -> str:
    """Write the comparison to `path` as PNG; return the path written."""
    plt = _pyplot()
    fig = compare_figure(section)
    if not os.path.splitext(str(path))[1]:
        path = f"{path}.png"  # what savefig would write anyway; say the real name
    try:
        fig.savefig(path, dpi=110)
    except OSError as exc:
        raise DoctorError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)
    return path


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise DoctorError("--plot needs matplotlib: pip install 'dtype-doctor[plot]'") from None
    return plt


def compare_figure(section: CompareResult) -> Any:
    """The matplotlib figure: latency (IQR bars, each labelled with its speed-up cell), peak memory,
    error (log) and the worst modules, from the rows the tables show (compare_rows.py)."""
    plt = _pyplot()
    rows = variant_rows(section)
    names = [r.name for r in rows]
    colors = [_COLORS.get(r.status, "#888888") for r in rows]
    layer_rows = [
        (name, layer, value)
        for name, layer in worst_layers(section, top=5)
        if (value := finite(layer.get("rel_l2"))) is not None and value > 0
    ]
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    ax_time, ax_mem, ax_err, ax_layers = axes.flat

    medians = [r.median_ms or 0.0 for r in rows]
    lows = [m - r.q1_ms if r.q1_ms is not None else 0.0 for m, r in zip(medians, rows, strict=True)]
    highs = [r.q3_ms - m if r.q3_ms is not None else 0.0 for m, r in zip(medians, rows, strict=True)]
    ys = list(range(len(names)))  # numeric positions: a missing bar must not drop its row
    ax_time.barh(ys, medians, xerr=[lows, highs], color=colors, capsize=3)
    ax_time.set_xlabel(f"latency, ms (median of {section.settings.get('repeats')}, bars: IQR)")
    for i, r in enumerate(rows):
        if r.median_ms is not None:
            ax_time.annotate(
                f"speed-up {r.speed_text}",
                (0.98, i),
                xycoords=("axes fraction", "data"),
                ha="right",
                va="center",
                fontsize=8,
            )
    ax_time.invert_yaxis()

    ax_mem.barh(ys, [r.peak_mib or 0.0 for r in rows], color=colors)
    ax_mem.set_xlabel("peak memory above baseline, MiB")
    ax_mem.invert_yaxis()

    shown = [
        e if e is not None and math.isfinite(e) and e > 0 else math.nan for e in (r.rel_l2 for r in rows)
    ]
    floor = min((e for e in shown if not math.isnan(e)), default=1e-6) / 10
    ax_err.barh(ys, [floor if math.isnan(e) else e for e in shown], color=colors)
    ax_err.set_xscale("log")
    ax_err.set_xlabel("output error vs fp32 (relative L2, log)")
    ax_err.invert_yaxis()
    for i, r in enumerate(rows):
        if r.status != "ok" or r.rel_l2 == 0:
            label = r.status if r.status != "ok" else "0 (reference)"
            ax_err.annotate(label, (0.02, i), xycoords=("axes fraction", "data"), va="center", fontsize=8)
    for ax in (ax_time, ax_mem, ax_err):
        ax.set_yticks(ys, names)

    if layer_rows:
        ax_layers.barh(
            [f"{n}: {layer.get('module')}" for n, layer, _ in layer_rows],
            [v for *_, v in layer_rows],
            color="#55A868",
        )
        ax_layers.set_xscale("log")
        ax_layers.set_xlabel("per-module error (fed the fp32 input)")
        ax_layers.invert_yaxis()
        ax_layers.tick_params(axis="y", labelsize=7)
    else:
        ax_layers.axis("off")
    settings = section.settings
    fig.suptitle(f"dtype-doctor compare · {settings.get('device_name') or settings.get('device')}")
    fig.tight_layout()
    return fig
