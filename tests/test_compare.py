"""compare: real models on CPU in fp32/fp16/bf16/autocast; numbers the user reads must agree.

No timing assertions: only that timings exist and are consistent with each other.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch

from dtype_doctor.cli import main
from dtype_doctor.comparing import compare, parse_precision
from dtype_doctor.comparing.measure import error_stats
from dtype_doctor.errors import DoctorError
from dtype_doctor.report import Report, Severity
from dtype_doctor.sections import CompareResult

sys.path.insert(0, str(Path(__file__).parent))
import compare_models as models

MODELS = str(Path(__file__).parent / "compare_models.py")
FIVE = ["fp32", "fp16", "bf16", "autocast-fp16", "autocast-bf16"]
FAST = {"repeats": 3, "warmup": 0}


def variants(report: Report) -> dict[str, dict]:
    return {v["name"]: v for v in report.section(CompareResult).variants}


def by_code(report: Report, code: str) -> list:
    return [f for f in report.findings if f.code == code]


@pytest.fixture(scope="module")
def benign() -> Report:
    return compare(models.benign, "4x3x8x8", keep_fp32=None, **FAST)


@pytest.fixture(scope="module")
def overflowing() -> Report:
    return compare(models.overflowing, "4x32", top_k=2, **FAST)


@pytest.fixture(scope="module")
def planted() -> Report:
    return compare(models.planted, "4x16", precisions=("fp32", "fp16", "bf16"), top_k=1, **FAST)


# ---------------------------------------------------------------------------------------------
# five precisions, consistent numbers


def test_all_five_precisions_run_on_a_benign_model(benign):
    v = variants(benign)
    assert list(v) == FIVE
    assert all(x["status"] == "ok" for x in v.values())
    for x in v.values():
        t = x["timing"]
        # fp32 is timed at the start and again at the end (drift), the others once
        assert t["repeats"] == (6 if x["name"] == "fp32" else 3)
        assert 0 < t["q1_s"] <= t["median_s"] <= t["q3_s"]
        assert x["throughput_per_s"] == pytest.approx(4 / t["median_s"])
        assert x["peak_memory_bytes"] is not None and x["peak_memory_bytes"] >= 0
        assert x["memory_method"] == "live-tensor-bytes"


def test_fp32_reference_has_zero_error(benign):
    err = variants(benign)["fp32"]["error"]
    assert err["max_abs"] == 0 and err["max_rel"] == 0 and err["rel_l2"] == 0
    assert err["cosine"] == pytest.approx(1.0)


def test_bf16_error_is_larger_than_fp16_on_a_benign_model(benign):
    v = variants(benign)
    for cast, auto in (("fp16", "autocast-fp16"), ("bf16", "autocast-bf16")):
        assert 0 < v[cast]["error"]["rel_l2"] < 0.05
        assert 0 < v[auto]["error"]["rel_l2"] < 0.05
    assert v["bf16"]["error"]["rel_l2"] > v["fp16"]["error"]["rel_l2"]
    assert v["autocast-bf16"]["error"]["rel_l2"] > v["autocast-fp16"]["error"]["rel_l2"]
    assert v["bf16"]["error"]["max_abs"] > v["fp16"]["error"]["max_abs"]
    assert 0.99 < v["bf16"]["error"]["cosine"] <= 1.0 + 1e-9


def test_weights_of_a_cast_model_are_exactly_half(benign):
    v = variants(benign)
    assert v["fp16"]["weights_bytes"] * 2 == v["fp32"]["weights_bytes"]
    assert v["bf16"]["weights_bytes"] * 2 == v["fp32"]["weights_bytes"]
    assert v["autocast-fp16"]["weights_bytes"] == v["fp32"]["weights_bytes"]  # autocast keeps fp32 weights


def test_benign_model_recommendation_names_a_variant_and_gives_reasons(benign):
    (rec,) = by_code(benign, "precision-recommendation")
    assert rec.severity == Severity.INFO
    assert rec.data["choice"] in FIVE
    assert len(rec.data["reasons"]) == 5
    assert rec.data["reasons"][2].startswith("bf16: ") and "error" in rec.data["reasons"][2]
    assert "median of 6" in rec.data["reasons"][0] and "median of 3" in rec.data["reasons"][1]
    assert rec.fixes and rec.fixes[0].snippet
    # nothing wrong with a benign model
    assert [f.code for f in benign.findings if f.severity != Severity.INFO] == []


def test_report_round_trips_through_json(benign):
    again = Report.from_json(benign.to_json())
    assert again.section(CompareResult).variants[1]["name"] == "fp16"
    assert again.codes() == benign.codes()


# ---------------------------------------------------------------------------------------------
# overflow


def test_overflowing_model_is_marked_and_the_producer_named(overflowing):
    v = variants(overflowing)
    assert v["fp16"]["status"] == "overflows"
    assert v["fp16"]["nonfinite_module"] == ["fragile", "Square"]
    assert v["autocast-fp16"]["status"] == "overflows"
    assert v["bf16"]["status"] == "ok" and math.isfinite(v["bf16"]["error"]["rel_l2"])
    f = next(f for f in by_code(overflowing, "precision-overflow") if f.data["variant"] == "fp16")
    assert f.location.module == "fragile" and f.location.module_type == "Square"
    assert f.severity == Severity.WARNING
    assert "bfloat16" in f.fixes[0].title  # the first fix for a cast fp16 model: bf16
    assert "to_precision(model, torch.float16, keep_fp32=['fragile'])" in f.fixes[1].snippet


def test_keeping_the_overflowing_layers_in_fp32_buys_back_a_finite_result(overflowing):
    v = variants(overflowing)
    keep = v["fp16+keep2"]
    assert keep["keep_fp32"] == ["fragile", "head"]  # head's input is out of fp16 range too
    assert keep["status"] == "ok" and keep["error"]["rel_l2"] < 0.01
    rec = by_code(overflowing, "precision-recommendation")[0]
    assert not rec.data["choice"].startswith(("fp16", "autocast-fp16")) or "keep" in rec.data["choice"]
    assert "fp16: overflows in 'fragile' (Square)" in rec.data["reasons"]


# ---------------------------------------------------------------------------------------------
# per-layer attribution


def test_attribution_names_the_planted_fragile_layer(planted):
    v = variants(planted)
    for name in ("fp16", "bf16"):
        layers = v[name]["layers"]
        assert layers[0]["module"] == "blocks.1.1" and layers[0]["module_type"] == "Cancel"
        assert layers[0]["rel_l2"] > 10 * layers[1]["rel_l2"]
        # its container is explained by it, so it is not ranked above it
        container = next(layer for layer in layers if layer["module"] == "blocks.1")
        assert container["explained_by"] == "blocks.1.1"
        assert layers.index(container) > layers.index(layers[0])
    f = next(f for f in by_code(planted, "precision-fragile-layers") if f.data["variant"] == "fp16")
    assert f.location.module == "blocks.1.1"
    assert "blocks.1.1" in f.fixes[0].snippet


def test_keeping_the_top_layer_in_fp32_buys_back_the_error(planted):
    v = variants(planted)
    assert v["fp16"]["error"]["rel_l2"] > 0.1  # the plant makes fp16 unusable
    assert v["fp16+keep1"]["keep_fp32"] == ["blocks.1.1"]
    assert v["fp16+keep1"]["error"]["rel_l2"] < v["fp16"]["error"]["rel_l2"] / 50
    assert v["bf16+keep1"]["error"]["rel_l2"] < v["bf16"]["error"]["rel_l2"] / 50
    high = {f.data["variant"] for f in by_code(planted, "precision-error-high")}
    assert high == {"fp16", "bf16"}
    rec = by_code(planted, "precision-recommendation")[0]
    assert rec.data["choice"] in ("fp32", "fp16+keep1", "bf16+keep1")


def test_keep_fp32_by_class_name_and_glob():
    report = compare(
        models.planted, "4x16", precisions=("fp32", "bf16"), keep_fp32=["Cancel"], attribution=False, **FAST
    )
    v = variants(report)
    assert v["bf16+keep1"]["keep_fp32"] == ["blocks.1.1"]
    assert v["bf16+keep1"]["error"]["rel_l2"] < v["bf16"]["error"]["rel_l2"] / 50
    report = compare(
        models.planted,
        "4x16",
        precisions=("fp32", "bf16"),
        keep_fp32=["blocks.1.*"],
        attribution=False,
        **FAST,
    )
    assert variants(report)["bf16+keep2"]["keep_fp32"] == ["blocks.1.0", "blocks.1.1"]
    with pytest.raises(DoctorError, match="no module matches 'nope'"):
        compare(models.planted, "4x16", precisions=("fp32", "bf16"), keep_fp32=["nope"], **FAST)


# ---------------------------------------------------------------------------------------------
# a precision that does not run


def test_failing_variant_reports_why_and_the_others_still_run():
    report = compare(models.makes_fp32, "4x8", keep_fp32=None, **FAST)
    v = variants(report)
    assert v["fp16"]["status"] == "fails"
    assert "expected m1 and m2 to have the same dtype" in v["fp16"]["failure"]
    assert v["bf16"]["status"] == "fails"
    assert v["autocast-fp16"]["status"] == "ok" and v["autocast-bf16"]["status"] == "ok"
    failed = {f.data["variant"]: f for f in by_code(report, "precision-variant-failed")}
    assert set(failed) == {"fp16", "bf16"}
    assert "c10::Half != float" in failed["fp16"].message
    assert failed["fp16"].evidence[0].text == v["fp16"]["failure"]
    rec = by_code(report, "precision-recommendation")[0]
    assert rec.data["choice"] in ("fp32", "autocast-fp16", "autocast-bf16")
    assert any(r.startswith("fp16: does not run: RuntimeError") for r in rec.data["reasons"])


def test_broken_factory_is_one_clear_error():
    with pytest.raises(DoctorError, match="cannot build the model"):
        compare(models.broken, "2x2", **FAST)


# ---------------------------------------------------------------------------------------------
# training step: gradients


def test_train_step_compares_gradients():
    report = compare(
        models.benign, "4x3x8x8", precisions=("fp32", "fp16", "bf16"), train_step=True, keep_fp32=None, **FAST
    )
    v = variants(report)
    assert v["fp32"]["grad_error"]["rel_l2"] == 0
    assert 0 < v["fp16"]["grad_error"]["rel_l2"] < v["bf16"]["grad_error"]["rel_l2"] < 0.2
    assert v["bf16"]["grad_error"]["worst_param"] in dict(models.benign().named_parameters())
    scale = v["fp16"]["loss_scale"]
    assert scale >= 1 and math.log2(scale).is_integer()
    assert v["bf16"]["loss_scale"] is None  # bf16 needs no loss scaling


# ---------------------------------------------------------------------------------------------
# a real small model


def test_real_gpt2_all_precisions_and_attribution():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=128, n_positions=32, bos_token_id=0, eos_token_id=0
    )

    def factory():
        return transformers.GPT2LMHeadModel(config)

    # use_cache=False: with a KV cache, attention's inputs carry state the shadow run cannot replay
    report = compare(factory, {"input_ids": "2x16:int64", "use_cache": False}, keep_fp32=None, **FAST)
    v = variants(report)
    assert list(v) == FIVE
    assert all(v[n]["status"] == "ok" for n in FIVE)
    assert v["bf16"]["error"]["rel_l2"] > v["fp16"]["error"]["rel_l2"] > 0
    assert v["autocast-bf16"]["error"]["rel_l2"] > v["autocast-fp16"]["error"]["rel_l2"] > 0
    names = dict(factory().named_modules())
    for n in ("fp16", "bf16", "autocast-bf16"):
        layers = v[n]["layers"]
        assert layers and all(layer["module"] in names for layer in layers)
        assert not [layer for layer in layers if layer["failed"]]
        ranked = [layer["rel_l2"] for layer in layers if not layer["explained_by"]]
        assert ranked == sorted(ranked, reverse=True) and ranked[0] > 0
        attention = [layer for layer in layers if layer["module_type"] == "GPT2Attention"]
        assert len(attention) == 2 and all(0 < a["rel_l2"] < 0.1 for a in attention)


# ---------------------------------------------------------------------------------------------
# pieces


@pytest.mark.parametrize(
    ("text", "dtype", "autocast"),
    [
        ("fp16", torch.float16, False),
        ("half", torch.float16, False),
        ("torch.bfloat16", torch.bfloat16, False),
        ("autocast-fp16", torch.float16, True),
        ("amp-bf16", torch.bfloat16, True),
        ("autocast_float16", torch.float16, True),
        ("float32", torch.float32, False),
    ],
)
def test_parse_precision_spellings(text, dtype, autocast):
    p = parse_precision(text)
    assert (p.dtype, p.autocast) == (dtype, autocast)


@pytest.mark.parametrize("text", ["int8", "fp13", "autocast-fp32", ""])
def test_parse_precision_rejects(text):
    with pytest.raises(DoctorError):
        parse_precision(text)


def test_error_stats_of_nested_outputs():
    ref = {"a": torch.tensor([1.0, 2.0]), "b": (torch.tensor([4.0]), torch.tensor([1]))}
    same = error_stats(ref, ref)
    assert same.max_abs == 0 and same.rel_l2 == 0 and same.numel == 3
    low = {"a": torch.tensor([1.0, 2.5]), "b": (torch.tensor([float("inf")]), torch.tensor([1]))}
    bad = error_stats(low, ref)
    assert bad.nonfinite == 1 and math.isinf(bad.rel_l2)
    half = {"a": torch.tensor([1.0, 2.5]), "b": (torch.tensor([4.0]), torch.tensor([1]))}
    err = error_stats(half, ref)
    assert err.max_abs == pytest.approx(0.5) and err.rel_l2 == pytest.approx(0.5 / math.sqrt(21))


# ---------------------------------------------------------------------------------------------
# command line


def test_cli_json_and_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")  # without it --plot is refused up front (exit 2, one line)
    png = tmp_path / "cmp.png"
    rc = main(
        [
            *("compare", f"{MODELS}:overflowing", "-i", "4x32", "-p", "fp32,fp16,bf16"),
            *("-n", "3", "--warmup", "0", "--no-keep", "--json", "--plot", str(png)),
        ]
    )
    out = capsys.readouterr()
    data = json.loads(out.out)
    assert rc == 1  # fp16 overflows: a problem found
    (section,) = [x for x in data["sections"] if x["type"] == "compare"]
    assert [v["name"] for v in section["variants"]] == ["fp32", "fp16", "bf16"]
    assert "precision-overflow" in [f["code"] for f in data["findings"]]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_console_shows_the_table(capsys):
    rc = main(["compare", f"{MODELS}:benign", "-i", "2x3x8x8", "-p", "fp32,bf16", "-n", "3", "--warmup", "0"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "precision" in out and "bf16" in out and "speed-up" in out
    assert "precision-recommendation" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["compare", "nowhere.py:build", "-i", "2x2"], "no such file"),
        (["compare", f"{MODELS}:benign"], "--input"),
        (["compare", f"{MODELS}:benign", "-i", "2xx2"], "cannot parse shape"),
        (["compare", f"{MODELS}:benign", "-i", "2x3x8x8", "-p", "fp13"], "unknown precision"),
        (["compare", f"{MODELS}:broken", "-i", "2x2"], "cannot build the model"),
        (["compare", f"{MODELS}:benign", "-i", "2x3x8x8", "--device", "cuda"], "cuda"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(argv, message, capsys):
    if "cuda" in argv and torch.cuda.is_available():
        pytest.skip("CUDA is here")
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err


# ---------------------------------------------------------------------------------------------
# CUDA (runs only where there is a GPU)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_uses_the_allocator_peak_and_synchronised_timing():
    report = compare(models.benign, "8x3x8x8", keep_fp32=None, device="cuda", **FAST)
    v = variants(report)
    assert all(x["memory_method"] == "cuda-allocator" for x in v.values())
    assert all(x["peak_memory_bytes"] > 0 for x in v.values() if x["status"] == "ok")
    assert report.section(CompareResult).settings["device_name"].startswith(torch.cuda.get_device_name())


def test_to_precision_reproduces_the_keep_row_the_recommendation_suggests(overflowing):
    from dtype_doctor import to_precision

    rec = by_code(overflowing, "precision-recommendation")[0]
    torch.manual_seed(0)
    model = models.overflowing().eval()
    reference = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(4, 32)
    with torch.no_grad():
        expected = model(x)
        model = to_precision(model, torch.float16, keep_fp32=["fragile", "head"])
        out = model(x.half())
    assert model.proj.weight.dtype == torch.float16
    assert model.head.weight.dtype == torch.float32 and torch.equal(
        model.head.weight, reference["head.weight"]
    )
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
    assert error_stats(out, expected).rel_l2 < 0.01
    if "keep" in rec.data["choice"]:
        assert "to_precision(model, torch.float16, keep_fp32=" in rec.fixes[0].snippet


def test_progress_bar_goes_to_stderr_and_changes_nothing(capsys):
    report = compare(models.makes_fp32, "2x8", precisions=("fp32", "autocast-bf16"), progress=True, **FAST)
    out = capsys.readouterr()
    assert out.out == ""
    assert [v["status"] for v in report.section(CompareResult).variants] == ["ok", "ok"]
