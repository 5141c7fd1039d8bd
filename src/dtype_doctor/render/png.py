"""A PNG of a comparison: latency with its spread and speed-up, peak memory, error, the worst modules.

matplotlib is optional (`pip install dtype-doctor[plot]`); it is imported only here.
"""

from __future__ import annotations

import io
import math
import textwrap
from typing import Any

from ..errors import DoctorError
from ..report import Report
from ..sections import CompareResult
from .base import PresentedRenderer
from .compare_rows import finite, memory_method, variant_rows, worst_layers
from .svg import shorten

_COLORS = {"ok": "#4C72B0", "overflows": "#DD8452", "fails": "#C44E52", "out-of-memory": "#C44E52"}


class PngRenderer(PresentedRenderer, name="png", extension=".png", to_stdout=False):
    """The plot of a comparison (`compare --plot`, `--output png=PATH`): a report with no
    comparison has nothing to plot and is refused with one line."""

    def render(self, report: Report, options: Any) -> bytes:
        section = report.section(CompareResult)
        if section is None:
            raise DoctorError(
                f"a {report.tool or 'this'} report has no comparison to plot (png is for compare)"
            )
        return compare_png(section)


def compare_png(section: CompareResult) -> bytes:
    """The comparison drawn as PNG bytes."""
    plt = _pyplot()
    fig = compare_figure(section)
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=110)
    finally:
        plt.close(fig)
    return buf.getvalue()


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise DoctorError("--plot needs matplotlib: pip install 'dtype-doctor[plot]'") from None
    return plt


def _time_label(r: Any) -> str:
    """The variant's name and the table's speed-up cell: "fp16 (2.00×)", "fp16 (speed-up unstable)"."""
    if r.median_ms is None:
        return r.name
    speed = r.speed_text if r.speed_text.endswith("×") else f"speed-up {r.speed_text}"
    return f"{r.name} ({speed})"


def _layer_rows(section: CompareResult) -> list[tuple[str, str, float]]:
    """(variant, module, error) of the worst modules; inf/NaN ones kept as inf (they matter most)."""
    out = []
    for name, layer in worst_layers(section, top=5):
        error = layer.get("rel_l2")
        broken = layer.get("nonfinite") or (isinstance(error, float) and not math.isfinite(error))
        value = math.inf if broken else finite(error)
        if value is not None and value > 0:
            out.append((name, str(layer.get("module")), value))
    return out


def _draw_layers(ax: Any, layer_rows: list[tuple[str, str, float]]) -> None:
    """Per-module error, log scale; a module that went inf/NaN is drawn hatched past the rest."""
    if not layer_rows:
        ax.axis("off")
        return
    finite_ones = [v for *_, v in layer_rows if math.isfinite(v)]
    ceiling = 10 * max(finite_ones, default=1.0)
    ys = list(range(len(layer_rows)))
    bars = ax.barh(ys, [v if math.isfinite(v) else ceiling for *_, v in layer_rows], color="#55A868")
    for bar, (*_, v) in zip(bars, layer_rows, strict=True):
        if not math.isfinite(v):
            bar.set_color("#DD8452")
            bar.set_hatch("//")
            ax.annotate(
                "inf/NaN",
                (bar.get_width(), bar.get_y() + bar.get_height() / 2),
                ha="right",
                va="center",
                fontsize=7,
                xytext=(-3, 0),
                textcoords="offset points",
            )
    ax.set_yticks(ys, [f"{n}: {shorten(m, 36)}" for n, m, _ in layer_rows], fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("per-module error (fed the fp32 input)")
    ax.invert_yaxis()


def compare_figure(section: CompareResult) -> Any:
    """The matplotlib figure: latency (IQR bars, each labelled with its speed-up cell), peak memory,
    error (log) and the worst modules, from the rows the tables show (compare_rows.py)."""
    plt = _pyplot()
    rows = variant_rows(section)
    names = [r.name for r in rows]
    colors = [_COLORS.get(r.status, "#888888") for r in rows]
    layer_rows = _layer_rows(section)
    tall = max(len(rows), len(layer_rows))  # rows of labels per panel: the figure grows with them
    fig, axes = plt.subplots(2, 2, figsize=(13, max(8.0, 2.5 + 0.5 * tall)))
    ax_time, ax_mem, ax_err, ax_layers = axes.flat

    medians = [r.median_ms or 0.0 for r in rows]
    lows = [m - r.q1_ms if r.q1_ms is not None else 0.0 for m, r in zip(medians, rows, strict=True)]
    highs = [r.q3_ms - m if r.q3_ms is not None else 0.0 for m, r in zip(medians, rows, strict=True)]
    ys = list(range(len(names)))  # numeric positions: a missing bar must not drop its row
    ax_time.barh(ys, medians, xerr=[lows, highs], color=colors, capsize=3)
    ax_time.set_xlabel(f"latency, ms (median of {section.settings.get('repeats')}, bars: IQR)")
    ax_time.invert_yaxis()

    ax_mem.barh(ys, [r.peak_mib or 0.0 for r in rows], color=colors)
    ax_mem.set_xlabel("peak memory, MiB\n" + textwrap.fill(memory_method(section), 60), fontsize=8)
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
    # the speed-up beside its name, not over the bar and its IQR whisker
    ax_time.set_yticks(ys, [_time_label(r) for r in rows])
    for ax in (ax_mem, ax_err):
        ax.set_yticks(ys, names)
    _draw_layers(ax_layers, layer_rows)
    settings = section.settings
    fig.suptitle(f"dtype-doctor compare · {settings.get('device_name') or settings.get('device')}")
    fig.tight_layout()
    return fig
