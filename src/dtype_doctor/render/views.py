"""Tables and plots from what known producers store, in the generic shapes the HTML draws.

compare:  the CompareResult section, through compare_rows.py (the rows the console and PNG show).
numerics: GradScaler findings with data["scales"] (the scale per step).
Only unit changes (s → ms, bytes → MiB) and picking; no measurement is derived here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict

from ..report import Report
from ..sections import CompareResult, EnvFacts, Plot, Table
from .compare_rows import (
    LAYER_COLUMNS,
    LAYERS_TITLE,
    compare_cells,
    finite,
    layer_cells,
    variant_rows,
    worst_layers,
)

_SCALE_CODES_KEY = "scales"


def compare_views(section: CompareResult) -> tuple[list[dict], list[dict]]:
    """The comparison and per-module tables (compare_rows.py: the console's rows, all columns) and
    bar charts of latency, peak memory, output error (log) and the worst modules' error."""
    rows = variant_rows(section)
    if not rows:
        return [], []
    columns, cells = compare_cells(section, wide=True)
    tables = [{"title": "Precision comparison", "columns": columns, "rows": cells}]
    layers = layer_cells(section, top=3)
    if layers:
        tables.append({"title": LAYERS_TITLE, "columns": list(LAYER_COLUMNS), "rows": layers})
    names = [r.name for r in rows]
    plots = [
        {
            "title": "Latency (median)",
            "kind": "bar",
            "x": names,
            "series": {"ms": [r.median_ms for r in rows]},
            "ylabel": "ms",
        },
        {
            "title": "Peak memory",
            "kind": "bar",
            "x": names,
            "series": {"MiB": [r.peak_mib for r in rows]},
            "ylabel": "MiB",
        },
        {
            "title": "Output error vs fp32",
            "kind": "bar",
            "x": names,
            "series": {"relative L2": [finite(r.rel_l2) for r in rows]},
            "ylabel": "rel. L2",
            "log": True,
        },
    ]
    layer_plot = _layer_plot(section)
    if layer_plot:
        plots.append(layer_plot)
    return tables, plots


def _layer_plot(section: CompareResult) -> dict | None:
    """The worst modules of the variants without kept modules, side by side."""
    worst = worst_layers(section, top=8)
    modules = list(dict.fromkeys(str(layer.get("module")) for _, layer in worst))[:8]
    if not modules:
        return None
    series: dict[str, list[float | None]] = {}
    broken: set[int] = set()  # modules whose output went inf/NaN: drawn, above every finite bar
    for name, layer in worst:
        values = series.setdefault(name, [None] * len(modules))
        if str(layer.get("module")) in modules:
            at = modules.index(str(layer.get("module")))
            error = layer.get("rel_l2")
            if layer.get("nonfinite") or (isinstance(error, float) and not math.isfinite(error)):
                broken.add(at)
                values[at] = math.inf
            else:
                values[at] = finite(error)
    ceiling = max((v for vs in series.values() for v in vs if v is not None and v < math.inf), default=1.0)
    for values in series.values():
        values[:] = [10 * (ceiling or 1.0) if v == math.inf else v for v in values]
    title = "Per-module error (relative L2)" + ("; inf/NaN drawn above the rest" if broken else "")
    return {
        "title": title,
        "kind": "bar",
        "x": [f"{m} (inf/NaN)" if i in broken else m for i, m in enumerate(modules)],
        "series": series,
        "ylabel": "rel. L2",
        "log": True,
    }


def scaler_plots(report: Report) -> list[dict]:
    plots = []
    for f in report.findings:
        scales = f.data.get(_SCALE_CODES_KEY) if isinstance(f.data, Mapping) else None
        if isinstance(scales, list) and len(scales) > 1 and f.code.startswith("grad-scaler"):
            plots.append(
                {
                    "title": f"GradScaler scale per step ({f.code})",
                    "kind": "line",
                    "series": {"scale": scales},
                    "xlabel": "step",
                    "ylabel": "scale",
                    "log": True,
                }
            )
            break
    return plots


def env_views(section: EnvFacts) -> list[dict]:
    """The env facts as the tables the console shows (same rows, same labels)."""
    from dataclasses import asdict

    from .tables import env_tables

    out = []
    for table in env_tables(asdict(section)):
        columns = [str(c.header) for c in table.columns]
        cells = [[str(cell) for cell in c.cells] for c in table.columns]
        rows = [list(row) for row in zip(*cells, strict=True)] if cells else []
        out.append(
            {"title": str(table.title or ""), "columns": columns if table.show_header else [], "rows": rows}
        )
    return out


def section_views(report: Report) -> tuple[list[dict], list[dict]]:
    """(tables, plots) in the generic shapes the HTML draws, from the report's sections by type."""
    tables: list[dict] = []
    plots: list[dict] = []
    for section in report.sections:
        if isinstance(section, CompareResult):
            more_tables, more_plots = compare_views(section)
            tables += more_tables
            plots += more_plots
        elif isinstance(section, EnvFacts):
            tables += env_views(section)
        elif isinstance(section, Table):
            tables.append(asdict(section))
        elif isinstance(section, Plot):
            plots.append(asdict(section))
    return tables, plots + scaler_plots(report)
