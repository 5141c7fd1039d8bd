"""The HTML report: one self-contained file, checked in a real headless browser."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from browser import render
from dtype_doctor import catalog
from dtype_doctor.cli import main
from dtype_doctor.render.html import DTYPE_COLOURS, render_html
from dtype_doctor.report import Evidence, Location, Operand, Origin, Report
from dtype_doctor.sections import CompareResult, DtypeMap, ModuleDtypes, Plot, Table


def _report() -> Report:
    finding = catalog.finding(
        "matmul-dtype-mismatch",
        names={"module": "time_embedding.linear_1", "dtype": "torch.float16"},
        message="mat1 and mat2 must have the same dtype, but got Float and Half",
        location=Location(
            module="time_embedding.linear_1", module_type="Linear", op="linear", file="train.py", line=42
        ),
        operands=[
            Operand(
                role="input",
                dtype="float32",
                shape=[2, 320],
                origin=Origin(
                    kind="op",
                    op="cat",
                    file="train.py",
                    line=17,
                    chain=[Origin(kind="input", name="latent_mask<script>alert(1)</script>")],
                ),
            ),
            Operand(
                role="weight",
                dtype="float16",
                shape=[1280, 320],
                origin=Origin(kind="parameter", name="time_embedding.linear_1.weight"),
            ),
        ],
        evidence=[Evidence(text="RuntimeError: mat1 and mat2 must have the same dtype", line=3)],
    )
    report = Report(tool="run", meta={"model": "UNet2DConditionModel", "device": "cpu"})
    report.add(finding)
    dtype_map = DtypeMap(
        [
            ModuleDtypes("", "UNet2DConditionModel"),
            ModuleDtypes("conv_in", "Conv2d", {"float16": 2}),
            ModuleDtypes("time_embedding", "TimestepEmbedding"),
            ModuleDtypes("time_embedding.linear_1", "Linear", {"float16": 2}),
            ModuleDtypes("time_embedding.linear_2", "Linear", {"float32": 2}),
            ModuleDtypes("norm_out", "GroupNorm", {"bfloat16": 2}),
        ]
    )
    report.sections += [
        dtype_map,
        Plot(
            title="Activation max |x| per layer",
            kind="line",
            x=["conv_in", "down.0", "mid", "up.0", "conv_out"],
            series={
                "float16": [3.0, 900.0, 70000.0, float("inf"), None],
                "float32": [2.5, 600, 5e4, 1.5e5, 8],
            },
            ylabel="max |x|",
            log=True,
        ),
        Table(title="Precision comparison", columns=["variant", "max error"], rows=[["fp16", "1.2e-3"]]),
    ]
    return report


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    out = tmp_path_factory.mktemp("html")
    path = out / "report.html"
    path.write_text(render_html(_report()), encoding="utf-8")
    return path, render(path, out)


def test_html_is_self_contained_and_escaped():
    text = render_html(_report())
    # nothing fetched from anywhere: no external URL in any attribute, no script at all
    assert not re.search(r"""(?:src|href)\s*=\s*["'](?:https?:)?//""", text)
    assert "<script" not in text
    assert "latent_mask&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "<svg" in text


def test_browser_shows_the_finding_with_operands_origins_and_fix(page):
    _, shown = page
    dom = shown.dom
    assert "matmul-dtype-mismatch" in dom
    assert "in 'time_embedding.linear_1' (Linear) at train.py:42" in dom
    assert "parameter 'time_embedding.linear_1.weight'" in dom
    assert "op cat at train.py:17" in dom
    assert "latent_mask&lt;script&gt;" in dom  # the DOM keeps the text as text
    assert "x = x.to(torch.float16)" in dom  # the catalog's fix, made concrete
    assert "Activation max |x| per layer" in dom and "Precision comparison" in dom


def test_browser_shows_module_tree_coloured_by_dtype(page):
    _, shown = page
    tree = shown.dom[shown.dom.index("Module tree by dtype") :]
    for name in ("conv_in", "time_embedding", "linear_1", "linear_2", "norm_out"):
        assert name in tree
    # time_embedding holds float16 and float32 children: shown as mixed; the hit links to finding 1
    assert re.search(r"time_embedding</span>.*?float16.*?float32.*?mixed", tree, re.S)
    assert 'href="#finding-1"' in tree


def test_screenshot_has_the_key_colours(page):
    image_mod = pytest.importorskip("PIL.Image", reason="Pillow is needed to read the screenshot")
    _, shown = page
    image = image_mod.open(shown.screenshot).convert("RGB")
    colours = set(image.getdata())

    def has(hex_colour: str) -> bool:
        r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
        return any(abs(r - c[0]) + abs(g - c[1]) + abs(b - c[2]) < 12 for c in colours)

    assert image.size[0] == 1280
    assert has("#dc2626"), "no error-red (severity badge / border) in the screenshot"
    assert has(DTYPE_COLOURS["float16"]) and has(DTYPE_COLOURS["float32"]) and has(DTYPE_COLOURS["bfloat16"])
    # the page is not blank below the findings: the plot was drawn
    lower = image.crop((0, image.size[1] // 2, image.size[0], image.size[1]))
    assert len(set(lower.getdata())) > 20


def test_empty_report_says_no_problems(tmp_path):
    html = render_html(Report(tool="check"))
    assert "no problems found" in html
    assert "Module tree" not in html


def test_repr_html_is_a_scoped_fragment():
    fragment = _report()._repr_html_()
    assert "<html" not in fragment and "<body" not in fragment
    assert "matmul-dtype-mismatch" in fragment
    # every rule in the embedded stylesheet is scoped to the report's own root element
    css = fragment[fragment.index("<style>") + 7 : fragment.index("</style>")]
    selectors = [s.strip() for rule in css.split("}") if "{" in rule for s in rule.split("{")[0].split(",")]
    assert selectors and all(s.startswith(".dtype-doctor") for s in selectors)


def test_cli_html_option_writes_the_file(tmp_path):
    rank0 = tmp_path / "report.rank0.json"
    rank0.write_text(_report().to_json(), encoding="utf-8")
    out = tmp_path / "out" / "merged.html"  # its folder is made, as pytest's --junitxml does
    assert main(["merge", str(rank0), "--html", str(out), "--no-color"]) in (0, 1)
    assert "matmul-dtype-mismatch" in out.read_text(encoding="utf-8")


def test_cli_html_unwritable_path_is_one_line(tmp_path, capsys):
    rank0 = tmp_path / "report.rank0.json"
    rank0.write_text(_report().to_json(), encoding="utf-8")
    (tmp_path / "a-file").write_text("")  # a folder that is a file: it cannot be made
    code = main(["merge", str(rank0), "--html", str(Path(tmp_path, "a-file", "x.html"))])
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot write" in err


def test_check_html_of_a_real_model_in_the_browser(tmp_path):
    """`check --html`: a real producer's report, rendered and read back from the browser."""
    pytest.importorskip("torch")
    model_file = Path(__file__).parent / "data" / "masked_model.py"
    out = tmp_path / "check.html"
    code = main(
        ["check", f"{model_file}:Masked", "--dtype", "float16", "--input", "2x4:float16", "--html", str(out)]
    )
    assert code in (0, 1)
    dom = render(out, tmp_path).dom
    assert "silent-promotion" in dom
    assert "op torch.ones at" in dom and "masked_model.py:13" in dom
    assert "mask = mask.to(torch.float16)" in dom


def test_audit_rows_draw_the_tree_with_repeats():
    torch = pytest.importorskip("torch")
    from dtype_doctor.checking.audit import audit

    layers = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(3)])
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4), layers).half()
    model[1].float()
    html = render_html(audit(model))
    tree = html[html.index("Module tree by dtype") :]
    assert re.search(r"\(root\)</span>.*?float16.*?float32.*?mixed", tree, re.S)
    assert re.search(r">1</span><span class=\"type\">LayerNorm</span><span class=\"dt\"[^>]*>float32<", tree)
    assert "<root>" not in tree.replace("&lt;root&gt;", "")


def test_compare_report_shows_table_and_plots_in_the_browser(tmp_path):
    """A real `dtype-doctor compare --json` output (tests/data/compare_report.json: a 4-layer MLP,
    5 precisions plus keep-fp32 variants, CPU) → the comparison table and its bar charts."""
    report = Report.from_json((Path(__file__).parent / "data" / "compare_report.json").read_text())
    path = tmp_path / "compare.html"
    path.write_text(render_html(report), encoding="utf-8")
    dom = render(path, tmp_path).dom
    table = dom[dom.index("Precision comparison") :]
    assert report.schema_version == 2  # a schema-1 file, read into typed sections
    names = [v["name"] for v in report.section(CompareResult).variants]
    assert names[:3] == ["fp32", "fp16", "bf16"]
    for name in names:
        assert f"<td>{name}</td>" in table
    for title in ("Latency (median)", "Peak memory", "Output error vs fp32", "Per-module error"):
        assert title in dom
    assert dom.count("<rect") >= 3 * len(names) - 2  # bars (error: fp32 itself is 0, not drawn on log)
    assert "precision-recommendation" in dom


def test_bar_chart_labels_and_log_floor():
    from dtype_doctor.render.svg import render_plot

    names = ["fp32", "fp16", "bf16", "autocast-fp16", "autocast-bf16", "autocast-bf16+keep3"]
    values = [1e-4, 1e-2, 3e-3, 1e-4, 3e-3, 2e-3]
    svg = render_plot({"title": "t", "kind": "bar", "x": names, "series": {"e": values}, "log": True})
    heights = [float(h) for h in re.findall(r'<rect [^>]*height="([0-9.]+)"', svg)]
    assert len(heights) == 6 and min(heights) > 5  # the smallest value still has a visible bar
    assert "rotate(-60" in svg  # long labels are slanted, not overprinted
    short = render_plot({"title": "t", "kind": "bar", "x": ["a", "b"], "series": {"e": [1, 2]}})
    assert "rotate(" not in short


def test_grad_scaler_history_is_plotted():
    finding = catalog.finding(
        "grad-scaler-overflow",
        data={"skipped_steps": [0, 1, 2], "scales": [65536.0, 32768.0, 16384.0, 8192.0]},
    )
    html = render_html(Report(tool="numerics", findings=[finding]))
    assert "GradScaler scale per step (grad-scaler-overflow)" in html
    assert html.count("<circle") == 4  # one point per step
