"""`dtype-doctor explain`: inputs, exit codes, JSON, one-line errors; and no torch import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dtype_doctor.cli import main
from dtype_doctor.report import Report

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "examples" / "logs"
MSG = "mat1 and mat2 must have the same dtype, but got Float and Half"


def _cli(*args, stdin: bytes | None = None):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run(
        [sys.executable, "-m", "dtype_doctor", "explain", *args], input=stdin, capture_output=True, env=env
    )


def test_text_argument_json(capsys):
    assert main(["explain", MSG, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["schema_version"] == 2
    finding = data["findings"][0]
    assert finding["code"] == "matmul-dtype-mismatch"
    assert finding["title"] and finding["cause"] and finding["fixes"]
    assert [(o["role"], o["dtype"]) for o in finding["operands"]] == [
        ("input", "float32"),
        ("weight", "float16"),
    ]
    assert finding["evidence"][0] == {"text": MSG, "line": 1, "source": None}
    assert Report.from_dict(data).findings[0].code == "matmul-dtype-mismatch"


def test_repeated_file_option_folds_across_files(capsys, tmp_path):
    a, b = tmp_path / "rank0.log", tmp_path / "rank1.log"
    a.write_text(f"step 1\nRuntimeError: {MSG}\n")
    b.write_text(f"RuntimeError: {MSG}\nInput type (float) and bias type (c10::Half) should be the same\n")
    assert main(["explain", "--file", str(a), "-f", str(b), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [(f["code"], f["count"]) for f in data["findings"]] == [
        ("matmul-dtype-mismatch", 2),
        ("conv-bias-dtype-mismatch", 1),
    ]
    assert {e["source"] for e in data["findings"][0]["evidence"]} == {str(a), str(b)}


def test_stdin_and_console_output():
    result = _cli("-", "--no-color", stdin=(LOGS / "xdit.log").read_bytes())
    assert result.returncode == 0, result.stderr
    out = result.stdout.decode()
    assert "apex-conflict" in out and "pip uninstall -y apex" in out


def test_nothing_recognised_exits_3_with_an_honest_unknown(capsys):
    assert main(["explain", "KeyError: 'attention_mask' while building the layer norm", "--json"]) == 3
    finding = json.loads(capsys.readouterr().out)["findings"][0]
    assert finding["code"] == "unknown"
    assert "norm-dtype-mismatch" in finding["data"]["nearest"]
    assert finding["evidence"][0]["text"].startswith("KeyError")


def test_plain_prose_is_unknown_with_no_nearest_family(capsys):
    assert main(["explain", "hello world", "--json"]) == 3
    assert json.loads(capsys.readouterr().out)["findings"][0]["data"]["nearest"] == []


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--file", "/nonexistent/train.log"], "no such file"),
        (["--file", "/"], "is a directory"),
        ([], "give the error TEXT"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, needle):
    result = _cli(*args)
    assert result.returncode == 2
    err = result.stderr.decode()
    assert needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_binary_garbage_is_read_as_text(tmp_path):
    log = tmp_path / "core.bin"
    log.write_bytes(b"\x00\xff\xfe\x80garbage\n" + MSG.encode() + b"\n\xc3\x28\x00")
    result = _cli("--file", str(log), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["findings"][0]["evidence"][0]["line"] == 2


def test_help_has_examples():
    result = _cli("--help")
    assert result.returncode == 0
    assert b"--file LOG" in result.stdout and b"examples:" in result.stdout


def test_explain_never_imports_torch():
    code = (
        "import sys\n"
        "from dtype_doctor import explain\n"
        "from dtype_doctor.cli import main\n"
        f"explain(open({str(LOGS / 'onetrainer.log')!r}).read())\n"
        "main(['explain', '--file', %r, '--json'])\n"
        "assert not [m for m in sys.modules if m == 'torch' or m.startswith('torch.')], 'torch imported'\n"
    ) % str(LOGS / "cogvlm.log")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env)
    assert result.returncode == 0, result.stderr.decode()


def test_a_device_mismatch_spelled_like_a_dtype_one_is_named_a_device_mismatch():
    from dtype_doctor import explain

    text = (
        "RuntimeError: Input type (torch.FloatTensor) and weight type (torch.cuda.FloatTensor) should be "
        "the same or input should be a MKLDNN tensor and weight is a dense tensor"
    )
    finding = explain(text).findings[0]
    assert finding.code == "device-mismatch"
    assert finding.message.startswith("Not a dtype problem: input on CPU, weight on CUDA")
    assert ".to(device)" in finding.fixes[0].snippet
