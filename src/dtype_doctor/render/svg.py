"""Inline SVG charts for the HTML report: line and bar plots from data a producer stored.

A plot is a dict (documented in docs/integrations.md):
    {"title": str, "kind": "line" | "bar", "x": [labels or numbers],
     "series": {name: [values, None for a gap]}, "xlabel": str, "ylabel": str, "log": bool}
The renderer only lays the given numbers out; it derives nothing from them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

PALETTE = ("#2563eb", "#ea580c", "#7c3aed", "#059669", "#dc2626", "#0891b2", "#ca8a04", "#db2777")
_W, _H = 640, 260
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 16, 28, 44
_CHAR_W = 6.5  # px per character of an axis label (the report's 11px sans-serif)


def _finite(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1e4 or abs(v) < 1e-2:
        return f"{v:.1e}"
    return f"{v:.3g}"


def shorten(label: Any, width: int = 24) -> str:
    """A label cut to `width` characters keeping its end (a module path's last names tell it apart)."""
    text = str(label)
    return text if len(text) <= width else "…" + text[-(width - 1) :]


def render_plot(plot: Mapping[str, Any]) -> str:
    """One <figure> with an inline SVG chart, or an escaped note when the data cannot be drawn."""
    title = str(plot.get("title", ""))
    if "svg" in plot:  # a producer that drew its own chart: embed it as an image, never as live markup
        import base64

        data = base64.b64encode(str(plot["svg"]).encode()).decode()
        return _figure(title, f'<img alt="{escape(title)}" src="data:image/svg+xml;base64,{data}">')
    if "png_base64" in plot:
        return _figure(
            title,
            f'<img alt="{escape(title)}" src="data:image/png;base64,{escape(str(plot["png_base64"]))}">',
        )
    series = plot.get("series") or {}
    if not isinstance(series, Mapping) or not series:
        return _figure(title, '<p class="muted">no data</p>')
    kind = plot.get("kind", "line")
    body = _bar(plot, series) if kind == "bar" else _line(plot, series)
    legend = "".join(
        f'<span class="legend"><i style="background:{PALETTE[i % len(PALETTE)]}"></i>{escape(str(name))}</span>'
        for i, name in enumerate(series)
    )
    return _figure(title, body + f'<div class="legends">{legend}</div>')


def _figure(title: str, inner: str) -> str:
    return f'<figure class="plot"><figcaption>{escape(title)}</figcaption>{inner}</figure>'


def _scale(values: Sequence[float], log: bool) -> tuple[float, float, bool]:
    if log:
        positive = [v for v in values if v > 0]
        if positive:
            lo, hi = math.log10(min(positive)), math.log10(max(positive))
            pad = max((hi - lo) * 0.1, 0.25)  # so that the smallest bar is not drawn at height 0
            return lo - pad, hi + pad / 4, True
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    if not log:
        lo = min(lo, 0.0)
    return lo, hi, False


def _axes(lo: float, hi: float, log: bool, plot: Mapping[str, Any]) -> list[str]:
    if hi == lo:
        hi = lo + 1
    parts = [
        f'<line x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{_H - _BOTTOM}" class="axis"/>',
        f'<line x1="{_LEFT}" y1="{_H - _BOTTOM}" x2="{_W - _RIGHT}" y2="{_H - _BOTTOM}" class="axis"/>',
    ]
    for i in range(5):
        frac = i / 4
        y = _H - _BOTTOM - frac * (_H - _TOP - _BOTTOM)
        value = lo + frac * (hi - lo)
        label = _fmt(10**value) if log else _fmt(value)
        parts.append(f'<line x1="{_LEFT}" y1="{y:.1f}" x2="{_W - _RIGHT}" y2="{y:.1f}" class="grid"/>')
        parts.append(f'<text x="{_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{label}</text>')
    if plot.get("ylabel"):
        parts.append(
            f'<text x="12" y="{_TOP + (_H - _TOP - _BOTTOM) / 2:.0f}" text-anchor="middle" '
            f'transform="rotate(-90 12 {_TOP + (_H - _TOP - _BOTTOM) / 2:.0f})">'
            f"{escape(str(plot['ylabel']))}{' (log)' if log else ''}</text>"
        )
    if plot.get("xlabel"):
        parts.append(
            f'<text x="{(_LEFT + _W - _RIGHT) / 2:.0f}" y="{_H - 6}" text-anchor="middle">'
            f"{escape(str(plot['xlabel']))}</text>"
        )
    return parts


def _y(value: float, lo: float, hi: float, log: bool) -> float | None:
    if log:
        if value <= 0:
            return None
        value = math.log10(value)
    span = (hi - lo) or 1.0
    return _H - _BOTTOM - (value - lo) / span * (_H - _TOP - _BOTTOM)


def _svg(parts: list[str], title: str, height: int = _H) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_W} {height}" width="{_W}" height="{height}" '
        f'role="img" aria-label="{escape(title)}">' + "".join(parts) + "</svg>"
    )


def _prepare(
    plot: Mapping[str, Any], series: Mapping[str, Sequence[Any]]
) -> tuple[dict[str, list[float | None]], float, float, bool]:
    """The series with non-finite values as None, and the value range (lo, hi, log) to plot them on."""
    log = bool(plot.get("log"))
    clean = {name: [_finite(v) for v in values] for name, values in series.items()}
    values = [v for vs in clean.values() for v in vs if v is not None and (v > 0 or not log)]
    lo, hi, log = _scale(values, log)
    if hi == lo:
        hi = lo + 1
    return clean, lo, hi, log


def _line(plot: Mapping[str, Any], series: Mapping[str, Sequence[Any]]) -> str:
    clean, lo, hi, log = _prepare(plot, series)
    n = max((len(v) for v in clean.values()), default=1)
    xs = list(plot.get("x") or range(n))
    step = (_W - _LEFT - _RIGHT) / max(n - 1, 1)
    parts = _axes(lo, hi, log, plot)
    for i, (_name, vs) in enumerate(clean.items()):
        colour = PALETTE[i % len(PALETTE)]
        path: list[str] = []
        pen_down = False
        for j, v in enumerate(vs):
            y = _y(v, lo, hi, log) if v is not None else None
            if y is None:
                pen_down = False
                continue
            x = _LEFT + j * step
            path.append(f"{'L' if pen_down else 'M'}{x:.1f},{y:.1f}")
            pen_down = True
            if n <= 40:
                parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{colour}"/>')
        if path:
            parts.append(f'<path d="{" ".join(path)}" fill="none" stroke="{colour}" stroke-width="2"/>')
    every = max(1, n // 8)
    for j in range(0, n, every):
        label = xs[j] if j < len(xs) else j
        parts.append(
            f'<text x="{_LEFT + j * step:.1f}" y="{_H - _BOTTOM + 14}" text-anchor="middle">'
            f"{escape(str(label)[:14])}</text>"
        )
    return _svg(parts, str(plot.get("title", "")))


def _bar(plot: Mapping[str, Any], series: Mapping[str, Sequence[Any]]) -> str:
    clean, lo, hi, log = _prepare(plot, series)
    labels = list(plot.get("x") or range(max((len(v) for v in clean.values()), default=0)))
    groups = max(len(labels), 1)
    group_w = (_W - _LEFT - _RIGHT) / groups
    bar_w = group_w * 0.8 / max(len(clean), 1)
    base = _y(10**lo if log else max(lo, 0.0), lo, hi, log) or (_H - _BOTTOM)
    parts = _axes(lo, hi, log, plot)
    for i, (name, vs) in enumerate(clean.items()):
        colour = PALETTE[i % len(PALETTE)]
        for j, v in enumerate(vs):
            y = _y(v, lo, hi, log) if v is not None else None
            if y is None:
                continue
            x = _LEFT + j * group_w + group_w * 0.1 + i * bar_w
            top, height = min(y, base), abs(base - y)
            parts.append(
                f'<rect x="{x:.1f}" y="{top:.1f}" width="{bar_w:.1f}" height="{height:.1f}" fill="{colour}">'
                f"<title>{escape(str(name))} {escape(str(labels[j] if j < len(labels) else j))}: "
                f"{_fmt(v)}</title></rect>"
            )
    texts = [shorten(label, 28) for label in labels]
    crowded = any(len(text) * _CHAR_W > group_w for text in texts)
    if crowded:  # slanted, a label reaches cos 60° of its length left of its bar: not past the edge
        fits = int((_LEFT + group_w / 2) / (_CHAR_W * 0.5))
        texts = [shorten(label, min(28, fits)) for label in labels]
    for j, text in enumerate(texts):
        x, y = _LEFT + (j + 0.5) * group_w, _H - _BOTTOM + 14
        if crowded:  # long labels: slanted 60°, ending under their bar, one row of text apart
            parts.append(
                f'<text x="{x:.1f}" y="{y}" text-anchor="end" transform="rotate(-60 {x:.1f} {y})">'
                f"<title>{escape(str(labels[j]))}</title>{escape(text)}</text>"
            )
        else:
            parts.append(f'<text x="{x:.1f}" y="{y}" text-anchor="middle">{escape(text)}</text>')
    # the slanted labels' depth (sin 60° of the longest), so none is cut off at the bottom
    height = _H + (int(max(len(t) for t in texts) * _CHAR_W * 0.87) if crowded and texts else 0)
    return _svg(parts, str(plot.get("title", "")), height)
