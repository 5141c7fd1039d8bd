"""`dtype-doctor numerics` end to end: JSON report, exit codes, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from dtype_doctor.cli import main
from numerics_models import T5_PRODUCER, VAE_PRODUCER  # type: ignore[import-not-found]

MODELS = str(Path(__file__).parent / "numerics_models.py")


def test_cli_names_the_producer_and_verifies_the_fp32_set(capsys):
    args = ["--input", "1x3x16x16", "--dtype", "fp16", "--steps", "1", "--find-fp32", "--json"]
    code = main(["numerics", f"{MODELS}:make_vae", *args])
    report = json.loads(capsys.readouterr().out)
    assert code == 1
    (finding,) = [f for f in report["findings"] if f["code"] == "fp16-overflow"]
    assert finding["location"]["module"] == VAE_PRODUCER
    assert report["meta"]["keep_fp32"] == [VAE_PRODUCER.rpartition(".")[0]]
    assert report["meta"]["keep_fp32_verified"] is True
    assert "searched and re-run" in finding["fixes"][0]["title"]


def test_cli_float32_run_predicts_the_float16_overflow(capsys):
    args = ["numerics", f"{MODELS}:make_t5", "--input", "input_ids=1x8:int64", "--steps", "1", "--json"]
    assert main([*args, "--train"]) == 0  # float32 is finite: information only, exit 0
    findings = json.loads(capsys.readouterr().out)["findings"]
    assert {f["severity"] for f in findings} == {"info"}
    (headroom,) = [f for f in findings if f["code"] == "fp16-headroom"]
    assert headroom["location"]["module"] == T5_PRODUCER
    assert "would overflow in float16" in headroom["message"]
    assert main([*args, "--dtype", "float16"]) == 1
    codes = [f["code"] for f in json.loads(capsys.readouterr().out)["findings"]]
    assert "fp16-overflow" in codes


def test_cli_bad_input_is_one_line_exit_2():
    result = subprocess.run(
        [sys.executable, "-m", "dtype_doctor", "numerics", f"{MODELS}:make_vae", "--input", "1xbad"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "cannot parse shape" in result.stderr
    assert "Traceback" not in result.stderr


_TWO_LINEARS = """
import torch
def two_linears():
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    with torch.no_grad():
        m[0].weight.fill_(300.0); m[0].bias.zero_(); m[1].weight.fill_(300.0)
    return m
def root_range():
    m = torch.nn.Linear(4, 4)
    with torch.no_grad():
        m.weight.fill_(6e4)
    return m
def big_weight():
    m = torch.nn.Linear(4, 4)
    with torch.no_grad():
        m.weight.fill_(1e5)
    return m
"""


def _write_models(tmp_path) -> str:
    path = tmp_path / "ovf_models.py"
    path.write_text(_TWO_LINEARS)
    return str(path)


def test_cli_find_fp32_when_the_search_is_not_enough(tmp_path, capsys):
    # the re-run still overflows: the verification reads the re-run's findings (no AttributeError)
    target = f"{_write_models(tmp_path)}:two_linears"
    args = ["--input", "2x4", "--dtype", "float16", "--find-fp32", "--json"]
    code = main(["numerics", target, *args])
    captured = capsys.readouterr()
    assert "internal error" not in captured.err
    report = json.loads(captured.out)
    assert code == 1
    assert report["meta"]["keep_fp32"]
    assert report["meta"]["keep_fp32_verified"] is False
    (finding,) = [f for f in report["findings"] if f["code"] == "fp16-overflow"]
    assert "not enough on its own" in finding["fixes"][0]["title"]


def test_cli_names_a_parameter_that_overflows_on_the_cast(tmp_path, capsys):
    # weights of 1e5 become inf in float16: not "non-finite in float32 too", and no empty keep-list
    args = ["--input", "2x4", "--dtype", "float16", "--json"]
    code = main(["numerics", f"{_write_models(tmp_path)}:big_weight", *args])
    (finding,) = json.loads(capsys.readouterr().out)["findings"]
    out = finding["message"] + json.dumps(finding["fixes"])
    assert code == 1
    assert "The parameter 'weight' is itself non-finite in float16" in out
    assert "overflowed (|x| > 65504) when the model was cast to float16" in out
    assert "non-finite too" not in out and "not a float16 range problem" not in out
    assert "Keep []" not in out and "keep_in_fp32(model, [])" not in out


def test_cli_nested_parameter_overflow_is_named_with_its_path(tmp_path, capsys):
    path = tmp_path / "nested.py"
    path.write_text(
        "import torch\n"
        "def nested():\n"
        "    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))\n"
        "    with torch.no_grad():\n"
        "        m[1].weight.fill_(1e5)\n"
        "    return m\n"
    )
    args = ["--input", "2x4", "--dtype", "float16", "--find-fp32", "--json"]
    assert main(["numerics", f"{path}:nested", *args]) == 1
    (finding,) = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["code"] == "fp16-overflow"]
    assert finding["data"]["nonfinite_params"] == ["1.weight"]
    assert "'1.weight' is itself non-finite in float16" in finding["message"]
    assert "keep_in_fp32(model, ['1'])" in finding["fixes"][0]["snippet"]
    assert not any("searched and re-run" in f["title"] for f in finding["fixes"])


def test_cli_root_module_overflow_offers_no_empty_keep_list(tmp_path, capsys):
    args = ["--input", "8x4", "--dtype", "float16", "--json"]
    code = main(["numerics", f"{_write_models(tmp_path)}:root_range", *args])
    (finding,) = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["code"] == "fp16-overflow"]
    out = json.dumps(finding["fixes"])
    assert code == 1
    assert "bfloat16" in out
    assert "Keep []" not in out and "keep_in_fp32(model, [])" not in out


def test_cli_empty_dtype_is_one_line_exit_2():
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "dtype_doctor",
            "numerics",
            f"{MODELS}:make_vae",
            "--input",
            "1x3x16x16",
            "--dtype=",
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "--dtype needs a dtype, got an empty value" in result.stderr
