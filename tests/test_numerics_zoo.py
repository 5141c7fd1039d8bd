"""The numerics zoo: planted low-precision bugs each named at the op (file:line, the value
reached), finite-but-wrong modules found by their float32 re-run, each emitted keep-in-float32 fix
executed; healthy real models (GPT-2, Llama, UNet tiny configs) give no finding."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import torch

import numerics_zoo as zoo  # type: ignore[import-not-found]
from dtype_doctor.cli import main
from dtype_doctor.numerics import NumericsMonitor, monitor_numerics
from dtype_doctor.numerics.api import model_error, run_numerics

ZOO = Path(zoo.__file__)
MODELS = str(Path(__file__).parent / "numerics_models.py")


def _planted_line(expression: str) -> int:
    lines = ZOO.read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if f"# planted: {expression}" in text)


def _x() -> torch.Tensor:
    return torch.randn(2, 8, zoo.D, generator=torch.Generator().manual_seed(0)).half()


@pytest.mark.parametrize("name", sorted(zoo.PLANTED))
def test_each_planted_layer_is_named_at_its_op(name):
    make, path, expression, code = zoo.PLANTED[name]
    report = run_numerics(make(), (_x(),), dtype=torch.float16, steps=1).report
    (finding,) = [f for f in report.findings if f.code == code]
    assert finding.location.module == path
    assert finding.location.op == expression
    assert finding.location.file == str(ZOO) and finding.location.line == _planted_line(expression)
    assert f"`{expression}` (tests/numerics_zoo.py:{_planted_line(expression)})" in finding.message


def test_rmsnorm_pow_overflow_is_finite_but_wrong_with_value_limit_and_verified_fix():
    report = run_numerics(zoo.make_rmsnorm(), (_x(),), dtype=torch.float16, steps=1).report
    (finding,) = report.findings
    assert finding.code == "finite-but-wrong" and finding.severity.value == "error"
    assert finding.data["rel_error"] > 0.9 and "threshold 0.1" in finding.message
    assert "went non-finite in float16: in float32 it reaches 1.61e+06, above float16's limit 6.55e+04" in (
        finding.message
    )
    before, after = finding.data["model_error"]["before"], finding.data["model_error"]["after"]
    assert before > 0.9 and after < 1e-3
    (fix,) = finding.fixes
    assert f"{before:.3g} → {after:.2g}" in fix.title
    # the emitted fix, executed on a fresh float16 model: the error vs float32 drops as printed
    model = zoo.make_rmsnorm().half()
    exec(fix.snippet, {"model": model})
    reference = zoo.make_rmsnorm()
    with torch.no_grad():
        got, want = model(_x()).float(), reference(_x().float())
    assert ((got - want).norm() / want.norm()).item() < 1e-3  # (printed: vs the float16 weights upcast)


def test_a_model_cast_to_float16_between_steps_is_checked_against_float32_on_its_first_float16_step():
    # whether a call is low precision is asked once per step (numerics/monitor._begin_root), from
    # the parameters' dtypes then: `.half()` keeps the Parameter objects and changes their dtype
    model = zoo.make_rmsnorm()
    with NumericsMonitor(model=model) as monitor, torch.no_grad():
        model(_x().float())  # a float32 step: nothing to compare
        assert monitor.report.findings == []
        model.half()
        model(_x())
        model(_x())  # the op inside is named at the module's next call
    (finding,) = [f for f in monitor.report.findings if f.code == "finite-but-wrong"]
    assert finding.location.module == "layer" and finding.location.op == "x.pow(2)"


@pytest.mark.parametrize("name", ["rmsnorm", "softmax"])
def test_every_emitted_keep_fix_runs_and_lowers_the_error(name):
    make = zoo.PLANTED[name][0]
    report = run_numerics(make(), (_x(),), dtype=torch.float16, steps=2).report
    (finding,) = [f for f in report.findings if f.code == "finite-but-wrong"]
    model = make().half()
    before = model_error(model, (_x(),))
    for fix in finding.fixes:
        exec(fix.snippet, {"model": model})
    assert model_error(model, (_x(),)) < before / 100


def test_cli_names_pow_its_line_and_the_fix(capsys):
    args = ["numerics", f"{ZOO}:make_rmsnorm", "--input", "2x8x64", "--dtype", "float16", "--json"]
    assert main(args) == 1
    (finding,) = json.loads(capsys.readouterr().out)["findings"]
    assert finding["code"] == "finite-but-wrong"
    assert finding["location"]["op"] == "x.pow(2)" and finding["location"]["line"] == _planted_line(
        "x.pow(2)"
    )
    assert "keep_in_fp32(model, ['layer'])" in finding["fixes"][0]["snippet"]


def test_run_numerics_finds_it_in_a_training_script(tmp_path, capsys, monkeypatch):
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys, torch
            sys.path.insert(0, {str(ZOO.parent)!r})
            import numerics_zoo
            model = numerics_zoo.make_rmsnorm().half()
            opt = torch.optim.SGD(model.parameters(), lr=1e-3)
            for step in range(3):
                x = torch.randn(2, 8, 64).half()
                loss = model(x).float().pow(2).mean()
                loss.backward()
                opt.step()
                opt.zero_grad()
            """
        )
    )
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--numerics", "--json", str(script)]) == 0  # run exits with the script's code
    findings = json.loads(capsys.readouterr().out)["findings"]
    (finding,) = [f for f in findings if f["code"] == "finite-but-wrong"]
    assert finding["location"]["module"] == "layer" and finding["location"]["op"] == "x.pow(2)"


def test_t5_backward_nan_is_told_as_a_consequence_of_the_forward_producer(capsys):
    args = ["numerics", f"{MODELS}:make_t5", "--input", "input_ids=1x8:int64", "--dtype", "float16"]
    assert main([*args, "--train", "--json"]) == 1
    findings = json.loads(capsys.readouterr().out)["findings"]
    assert findings[0]["data"]["phase"] == "forward"  # the report leads with the forward producer
    producer = findings[0]["location"]["module"]
    (back,) = [f for f in findings if f["data"].get("phase") == "backward"]
    assert back["data"]["consequence_of"] == producer and back["severity"] == "info"
    assert f"consequence of the forward overflow in '{producer}'" in back["message"]
    assert not any("GradScaler" in fix["title"] for fix in back["fixes"])


def test_lazy_linear_trains_without_internal_error(tmp_path, capsys):
    (tmp_path / "lazy.py").write_text(
        "import torch\ndef make():\n    return torch.nn.Sequential(torch.nn.LazyLinear(4), torch.nn.ReLU())\n"
    )
    for dtype in ([], ["--dtype", "float16"]):
        assert main(["numerics", f"{tmp_path / 'lazy.py'}:make", "--input", "2x8", "--train", *dtype]) == 0
    assert "no problems found" in capsys.readouterr().out


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", ["gpt2", "llama", "unet"])
def test_healthy_real_models_give_no_finding(name, dtype):
    pytest.importorskip("transformers")
    pytest.importorskip("diffusers")
    from test_noise import MODELS  # type: ignore[import-not-found]

    make, forward = MODELS[name]
    torch.manual_seed(0)
    model = make().eval().to(dtype)
    with monitor_numerics(model, backward=False) as mon, torch.no_grad():
        forward(model, dtype)
        forward(model, dtype)
    assert mon.report.findings == []
    assert mon.accuracy is not None and mon.accuracy.done  # the float32 re-run did happen


class _MaskOut(torch.nn.Module):
    """Returns an additive mask built from its dtype's minimum, as transformers models do."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = torch.zeros_like(x)
        mask[..., -2:] = torch.finfo(x.dtype).min
        return mask


def test_a_dtype_min_attention_mask_is_not_wrong():
    model = torch.nn.Sequential(torch.nn.Linear(zoo.D, zoo.D), _MaskOut()).half()
    report = run_numerics(model, (_x(),), steps=1).report
    assert "finite-but-wrong" not in report.codes()  # -65504 vs float32's -3.4e38 is no arithmetic error
