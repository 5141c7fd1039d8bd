"""issue 20 (newcomer): what `compare` shows on CPU. Peak memory is measured (live tensor bytes,
said in the caption), not a false "0B"; a library's warning at each build is printed once; the
plot's labels do not overlap, with many modules and inf ones included."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dtype_doctor.comparing import compare
from dtype_doctor.sections import CompareResult

sys.path.insert(0, str(Path(__file__).parent))
import numerics_models

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).parent
FAST = ("-n", "1", "--warmup", "0", "--no-progress")


def cli(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{TESTS}", "COLUMNS": "200"}
    return subprocess.Popen(
        [sys.executable, "-m", "dtype_doctor", "compare", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _compare_vae() -> subprocess.Popen:
    # a real diffusers AutoencoderKL: diffusers warns at each `.to(float16)`, once per precision
    return cli(f"{TESTS / 'numerics_models.py'}:make_vae", "-i", "1x3x16x16", "-p", "fp32,fp16,bf16", *FAST)


@pytest.fixture(scope="module", autouse=True)
def vae_started(request: pytest.FixtureRequest) -> Iterator[subprocess.Popen | None]:
    """The CLI's compare of the VAE, started with this file's first test when a selected test reads
    it: the in-process tests run meanwhile."""
    here = Path(__file__).resolve()
    wanted = any(
        item.path == here and "vae_run" in getattr(item, "fixturenames", ()) for item in request.session.items
    )
    proc = _compare_vae() if wanted else None
    yield proc
    if proc is not None and proc.poll() is None:  # a test stopped the session before it was read
        proc.kill()
        proc.communicate()


@pytest.fixture(scope="module")
def vae_run(vae_started: subprocess.Popen | None) -> subprocess.CompletedProcess:
    proc = vae_started or _compare_vae()
    out, err = proc.communicate(timeout=600)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_cpu_peak_memory_of_half_precision_is_about_half():
    report = compare(numerics_models.make_vae, "1x3x16x16", precisions=("fp32", "fp16", "bf16"),
                     keep_fp32=None, attribution=False, repeats=1, warmup=0)  # fmt: skip
    v = {x["name"]: x for x in report.section(CompareResult).variants}
    fp32 = v["fp32"]["peak_memory_bytes"]
    assert fp32 > v["fp32"]["weights_bytes"] > 0  # the weights, and what the run made on top
    for low in ("fp16", "bf16"):
        assert v[low]["memory_method"] == "live-tensor-bytes"
        assert 0.3 < v[low]["peak_memory_bytes"] / fp32 < 0.7
    recommendation = next(f for f in report.findings if f.code == "precision-recommendation")
    assert "0.00× fp32" not in str(recommendation.message) + str(recommendation.data)


def _overlaps(boxes: list) -> list[tuple[int, int]]:
    return [
        (i, j) for i in range(len(boxes)) for j in range(i + 1, len(boxes)) if boxes[i].overlaps(boxes[j])
    ]


def test_png_labels_do_not_overlap_and_inf_modules_are_drawn():
    pytest.importorskip("matplotlib")
    from dtype_doctor.render.png import compare_figure

    report = compare(numerics_models.make_vae, "1x3x16x16", precisions=("fp32", "fp16", "bf16"),
                     repeats=1, warmup=0, top_k=2)  # fmt: skip
    fig = compare_figure(report.section(CompareResult))
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax_time, _, _, ax_layers = fig.axes[:4]
    for ax in (ax_time, ax_layers):
        labels = [t for t in ax.get_yticklabels() if t.get_text()]
        assert len(labels) >= 3
        assert not _overlaps([t.get_window_extent(renderer) for t in labels])
        # no text drawn over the bars' area (the speed-up used to sit on the bars and whiskers)
        assert not [t for t in ax.texts if "speed-up" in t.get_text()]
    names = [t.get_text() for t in ax_time.get_yticklabels()]
    assert any(re.fullmatch(r"fp16 \(.+\)", n) for n in names)  # the speed-up beside the name
    layer_names = [t.get_text() for t in ax_layers.get_yticklabels()]
    assert any("decoder.up_blocks.0.resnets.0.conv1" in n for n in layer_names)  # the one that overflows
    assert any(t.get_text() == "inf/NaN" for t in ax_layers.texts)
    width = fig.get_window_extent(renderer).x1
    assert all(t.get_window_extent(renderer).x0 >= 0 and t.get_window_extent(renderer).x1 <= width
               for t in ax_layers.get_yticklabels())  # fmt: skip


def test_svg_bar_labels_of_many_modules_are_slanted_inside_the_picture():
    from dtype_doctor.render.svg import render_plot

    modules = [f"decoder.up_blocks.{i}.resnets.0.conv{i}" for i in range(12)]
    svg = render_plot({"title": "per module", "kind": "bar", "x": modules, "series": {"fp16": [0.1] * 12}})
    height = int(re.search(r'height="(\d+)"', svg).group(1))
    texts = re.findall(r'<text x="([\d.]+)" y="([\d.]+)" text-anchor="end" transform="rotate\(-60[^"]*">'
                       r"<title>([^<]*)</title>([^<]*)</text>", svg)  # fmt: skip
    assert len(texts) == 12
    for x, y, full, shown in texts:
        assert full in modules and shown.endswith(full[-10:])  # cut at the front: the end tells apart
        depth = len(shown) * 6.5 * 0.87
        assert float(y) + depth <= height and float(x) - len(shown) * 6.5 * 0.5 >= 0


def test_cpu_peak_memory_is_measured_and_said_how(vae_run):
    out = vae_run.stdout
    rows = {
        m[0]: m[1]
        for m in re.findall(r"^ (fp32|fp16|bf16)\s+\S+.*?\s(\d[\d.]*[KMG]?B?)\s+\S+\s*$", out, re.M)
    }
    assert set(rows) == {"fp32", "fp16", "bf16"}, out
    assert "0B" not in rows.values()
    caption = "peak mem: weights + the first run's peak of live tensor bytes (CPU: tensors only)"
    assert caption in re.sub(r"\s+", " ", out)


def test_a_library_warning_repeated_at_each_build_is_printed_once(vae_run):
    said = vae_run.stderr.count("There are modules in AutoencoderKL that should be kept in float32")
    assert said == 1, vae_run.stderr
