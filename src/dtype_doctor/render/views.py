"""Tables and plots from what known producers store, in the generic shapes the HTML draws.

compare:  the CompareResult section: {"variants": [{"name", "status", "timing": {"median_s", "q1_s",
          "q3_s"}, "peak_memory_bytes", "error": {"rel_l2"}, "layers": [{"module", "rel_l2",
          "explained_by"}]}], ...}
numerics: GradScaler findings with data["scales"] (the scale per step).
Only unit changes (s → ms, bytes → MiB) and picking; no measurement is derived here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from ..report import Report
from ..sections import CompareResult, EnvFacts, Plot, Table

_SCALE_CODES_KEY = "scales"


def _num(value: Any, scale: float = 1.0) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value * scale if math.isfinite(value) else None


def _cell(value: float | None, fmt: str = ".3g") -> str:
    return "–" if value is None else format(value, fmt)


def _get(mapping: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(mapping, Mapping):
            return None
        mapping = mapping.get(key)
    return mapping


def compare_views(section: CompareResult) -> tuple[list[dict], list[dict]]:
    variants = [v for v in section.variants if isinstance(v, Mapping)]
    if not variants:
        return [], []
    names = [str(v.get("name", "?")) for v in variants]
    latency = [_num(_get(v, "timing", "median_s"), 1e3) for v in variants]
    memory = [_num(v.get("peak_memory_bytes"), 1 / 2**20) for v in variants]
    error = [_num(_get(v, "error", "rel_l2")) for v in variants]
    rows = []
    for v, name, ms, mib, err in zip(variants, names, latency, memory, error, strict=True):
        q1, q3 = _num(_get(v, "timing", "q1_s"), 1e3), _num(_get(v, "timing", "q3_s"), 1e3)
        worst = next(
            (
                lay
                for lay in v.get("layers") or []
                if isinstance(lay, Mapping) and not lay.get("explained_by")
            ),
            None,
        )
        rows.append(
            [
                name,
                str(v.get("status", "")),
                _cell(ms),
                f"{_cell(q1)}–{_cell(q3)}" if q1 is not None and q3 is not None else "–",
                _cell(mib),
                _cell(err),
                f"{worst.get('module')} ({_cell(_num(worst.get('rel_l2')))})" if worst else "–",
            ]
        )
    table = {
        "title": "Precision comparison",
        "columns": [
            "variant",
            "status",
            "latency ms",
            "IQR ms",
            "peak MiB",
            "error (rel L2)",
            "worst module",
        ],
        "rows": rows,
    }
    plots = [
        {"title": "Latency (median)", "kind": "bar", "x": names, "series": {"ms": latency}, "ylabel": "ms"},
        {"title": "Peak memory", "kind": "bar", "x": names, "series": {"MiB": memory}, "ylabel": "MiB"},
        {
            "title": "Output error vs fp32",
            "kind": "bar",
            "x": names,
            "series": {"relative L2": error},
            "ylabel": "rel. L2",
            "log": True,
        },
    ]
    layer_plot = _layer_plot(variants)
    if layer_plot:
        plots.append(layer_plot)
    return [table], plots


def _layer_plot(variants: list[Mapping[str, Any]]) -> dict | None:
    """The worst modules of the variants without kept modules, side by side."""
    shown = [v for v in variants if not v.get("keep_fp32") and v.get("layers")]
    modules: list[str] = []
    for v in shown:
        for lay in v["layers"]:
            if isinstance(lay, Mapping) and not lay.get("explained_by") and lay.get("module") not in modules:
                modules.append(str(lay.get("module")))
    modules = modules[:8]
    if not modules:
        return None
    series = {}
    for v in shown:
        by_module = {
            str(lay.get("module")): _num(lay.get("rel_l2")) for lay in v["layers"] if isinstance(lay, Mapping)
        }
        series[str(v.get("name"))] = [by_module.get(m) for m in modules]
    return {
        "title": "Per-module error (relative L2)",
        "kind": "bar",
        "x": modules,
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
