"""compare's section is drawn from one set of rows (render/compare_rows.py): the console table, the
HTML table and the PNG show the same cells, and an unstable timing never shows a speed-up number."""

from __future__ import annotations

import re

import pytest

from dtype_doctor.render.html import render_html
from dtype_doctor.report import Report
from dtype_doctor.sections import CompareResult

UNSTABLE_WHY = "IQR 40% of the median"


def _timing(median_s: float, unstable: str | None = None) -> dict:
    return {"median_s": median_s, "q1_s": median_s * 0.9, "q3_s": median_s * 1.1, "unstable": unstable}


def _section(fp32_unstable: bool) -> CompareResult:
    return CompareResult(
        settings={"device": "cpu", "repeats": 5, "warmup": 1, "torch": "2.13.0"},
        variants=[
            {
                "name": "fp32",
                "status": "ok",
                "timing": _timing(0.004, UNSTABLE_WHY if fp32_unstable else None),
                "peak_memory_bytes": 3 * 2**20,
                "error": {"rel_l2": 0.0},
            },
            {
                "name": "fp16",
                "status": "ok",
                "timing": _timing(0.002),
                "peak_memory_bytes": 2**20,
                "error": {"rel_l2": 1.5e-3},
                "layers": [{"module": "fc2", "module_type": "Linear", "rel_l2": 1.5e-3}],
            },
            {"name": "bf16", "status": "fails", "timing": None, "error": None},
        ],
    )


def _console_row(report: Report, name: str) -> str:
    return next(line for line in str(report).splitlines() if line.split()[:1] == [name])


def _html_rows(report: Report) -> dict[str, list[str]]:
    html = render_html(report)
    table = html[html.index("Precision comparison") :]
    table = table[: table.index("</table>")]
    rows = [re.findall(r"<td>(.*?)</td>", row) for row in table.split("<tr>")[2:]]
    return {row[0]: row for row in rows}


def test_a_stable_speed_up_is_the_same_number_in_console_and_html():
    report = Report(tool="compare", sections=[_section(fp32_unstable=False)])
    assert "2.00×" in _console_row(report, "fp16")
    html = _html_rows(report)
    assert html["fp16"][:4] == ["fp16", "ok", "2 ±0.2", "2.00×"]
    assert html["fp32"][3] == "1.00×" and html["bf16"][3] == "–"


def test_an_unstable_timing_shows_no_speed_up_number_in_console_and_html():
    report = Report(tool="compare", sections=[_section(fp32_unstable=True)])
    for name in ("fp32", "fp16"):  # fp32's own timing is unstable, so no variant compares with it
        row = _console_row(report, name)
        assert "unstable" in row and "×" not in row
        assert _html_rows(report)[name][3] == "unstable"
    assert "×" not in "".join(_html_rows(report)["fp16"])


def test_console_and_html_show_the_same_cells():
    report = Report(tool="compare", sections=[_section(fp32_unstable=False)])
    for name, cells in _html_rows(report).items():
        console = _console_row(report, name)
        for cell in cells[:6]:  # the console's default columns come first, in the same order
            assert cell in console


@pytest.mark.parametrize("unstable", [False, True])
def test_the_png_labels_each_latency_bar_with_the_tables_speed_up(tmp_path, unstable):
    pytest.importorskip("matplotlib")
    from dtype_doctor.render.png import compare_figure, compare_png

    fig = compare_figure(_section(fp32_unstable=unstable))
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]  # beside the name, not on the bar
    if unstable:
        assert labels == ["fp32 (speed-up unstable)", "fp16 (speed-up unstable)", "bf16"]
    else:
        assert labels == ["fp32 (1.00×)", "fp16 (2.00×)", "bf16"]  # bf16 failed: no timing
    assert compare_png(_section(fp32_unstable=unstable))[:4] == b"\x89PNG"


def test_a_module_that_went_inf_is_in_the_per_module_plot():
    from dtype_doctor.render.views import compare_views

    section = _section(fp32_unstable=False)
    section.variants[1]["layers"] = [
        {"module": "fragile", "module_type": "Square", "rel_l2": float("inf"), "nonfinite": True},
        {"module": "fc2", "module_type": "Linear", "rel_l2": 1.5e-3},
    ]
    _, plots = compare_views(section)
    (plot,) = [p for p in plots if p["title"].startswith("Per-module error")]
    assert plot["x"] == ["fragile (inf/NaN)", "fc2"]
    fragile, fc2 = plot["series"]["fp16"]
    assert fragile > fc2 > 0 and "inf/NaN drawn above the rest" in plot["title"]
