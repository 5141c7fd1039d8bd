"""A PNG of a comparison: latency with its spread, peak memory, error, and the worst modules.

matplotlib is optional (`pip install dtype-doctor[plot]`); it is imported only here.
"""

from __future__ import annotations

import math
import os
from typing import Any

from ..errors import DoctorError

_COLORS = {"ok": "#4C72B0", "overflows": "#DD8452", "fails": "#C44E52", "out-of-memory": "#C44E52"}


def plot_compare(meta: dict[str, Any], path: str) -> str:
    """Write the comparison in `meta` (CompareResult.as_meta()) to `path` as PNG; return the path."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise DoctorError("--plot needs matplotlib: pip install 'dtype-doctor[plot]'") from None

    variants = meta.get("variants", [])
    names = [v["name"] for v in variants]
    colors = [_COLORS.get(v["status"], "#888888") for v in variants]
    layer_rows = [
        (v["name"], layer)
        for v in variants
        if not v.get("keep_fp32")
        for layer in [x for x in v.get("layers", []) if not x.get("explained_by")][:5]
        if layer["rel_l2"] is not None and math.isfinite(layer["rel_l2"]) and layer["rel_l2"] > 0
    ]
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    ax_time, ax_mem, ax_err, ax_layers = axes.flat

    medians = [_ms((v.get("timing") or {}).get("median_s")) for v in variants]
    lows = [m - _ms((v.get("timing") or {}).get("q1_s")) for m, v in zip(medians, variants, strict=True)]
    highs = [_ms((v.get("timing") or {}).get("q3_s")) - m for m, v in zip(medians, variants, strict=True)]
    ys = list(range(len(names)))  # numeric positions: a missing bar must not drop its row
    ax_time.barh(ys, medians, xerr=[lows, highs], color=colors, capsize=3)
    ax_time.set_xlabel(f"latency, ms (median of {meta.get('repeats')}, bars: IQR)")
    ax_time.invert_yaxis()

    mem = [(v.get("peak_memory_bytes") or 0) / 2**20 for v in variants]
    ax_mem.barh(ys, mem, color=colors)
    ax_mem.set_xlabel("peak memory above baseline, MiB")
    ax_mem.invert_yaxis()

    errs = [((v.get("error") or {}).get("rel_l2")) for v in variants]
    shown = [e if e is not None and math.isfinite(e) and e > 0 else math.nan for e in errs]
    floor = min((e for e in shown if not math.isnan(e)), default=1e-6) / 10
    ax_err.barh(ys, [floor if math.isnan(e) else e for e in shown], color=colors)
    ax_err.set_xscale("log")
    ax_err.set_xlabel("output error vs fp32 (relative L2, log)")
    ax_err.invert_yaxis()
    for i, (e, v) in enumerate(zip(errs, variants, strict=True)):
        if v["status"] != "ok" or e == 0:
            label = v["status"] if v["status"] != "ok" else "0 (reference)"
            ax_err.annotate(label, (0.02, i), xycoords=("axes fraction", "data"), va="center", fontsize=8)
    for ax in (ax_time, ax_mem, ax_err):
        ax.set_yticks(ys, names)

    if layer_rows:
        labels = [f"{n}: {layer['module']}" for n, layer in layer_rows]
        ax_layers.barh(labels, [layer["rel_l2"] for _, layer in layer_rows], color="#55A868")
        ax_layers.set_xscale("log")
        ax_layers.set_xlabel("per-module error (fed the fp32 input)")
        ax_layers.invert_yaxis()
        ax_layers.tick_params(axis="y", labelsize=7)
    else:
        ax_layers.axis("off")
    fig.suptitle(f"dtype-doctor compare · {meta.get('device_name') or meta.get('device')}")
    fig.tight_layout()
    if not os.path.splitext(str(path))[1]:
        path = f"{path}.png"  # what savefig would write anyway; say the real name
    try:
        fig.savefig(path, dpi=110)
    except OSError as exc:
        raise DoctorError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)
    return path


def _ms(s: float | None) -> float:
    return s * 1e3 if s is not None and not math.isnan(s) else 0.0
