"""dtype-doctor run: a program under watch keeps its argv, exit code and exceptions; reports per rank."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dtype_doctor.cli import main

SRC = Path(__file__).resolve().parents[1] / "src"

TRAIN = textwrap.dedent(
    """\
    import sys
    import torch
    from torch import nn

    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)).half()
    print("argv", sys.argv[1:])
    latents = torch.randn(2, 2, dtype=torch.float16)
    mask = torch.zeros(2, 2)
    batch = torch.cat([latents, mask], dim=1)
    out = model(batch)
    sys.exit(int(sys.argv[1]))
    """
)


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(TRAIN)
    return path


@pytest.mark.skipif(sys.version_info < (3, 11), reason="exception notes (PEP 678) are Python 3.11+")
def test_a_failing_script_keeps_its_traceback_and_gets_the_diagnosis(script, tmp_path, capsys):
    report = tmp_path / "report.json"
    code = main(["run", "--json", str(report), str(script), "0", "--lr", "3"])
    out, err = capsys.readouterr()
    assert code == 1  # what python does with an uncaught exception
    assert "argv ['0', '--lr', '3']" in out
    assert err.startswith('Traceback (most recent call last):\n  File "' + str(script))  # no run.py frames
    assert "RuntimeError: mat1 and mat2 must have the same dtype" in err
    assert "dtype-doctor [matmul-dtype-mismatch]" in err and "earlier: [silent-promotion] torch.cat" in err
    data = json.loads(report.read_text())
    codes = [f["code"] for f in data["findings"]]
    assert codes == ["silent-promotion", "matmul-dtype-mismatch"]
    cat = data["findings"][0]
    mask = next(o for o in cat["operands"] if o["dtype"] == "float32")
    assert mask["origin"] == {**mask["origin"], "kind": "op", "op": "torch.zeros", "line": 8}
    assert mask["origin"]["file"].endswith("train.py")
    linear = data["findings"][1]
    assert linear["location"]["module"] == "0"
    assert linear["operands"][0]["origin"]["chain"][0]["kind"] == "promotion"


def test_exit_code_and_fix_mode(script, capsys):
    assert main(["run", "--mode", "fix", str(script), "3"]) == 3
    err = capsys.readouterr().err
    assert "silent-promotion" in err and "1 warning" in err and "ERROR" not in err.split("watch")[-1]


def test_each_torchrun_rank_writes_its_own_report(script, tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    assert main(["run", "--mode", "fix", "--json", str(tmp_path / "r.json"), str(script), "0"]) == 0
    data = json.loads((tmp_path / "r.rank1.json").read_text())
    assert data["meta"]["rank"] == 1 and all(f["location"]["rank"] == 1 for f in data["findings"])
    assert main(["run", "--mode", "fix", "--json", str(tmp_path / "r-{rank}.json"), str(script), "0"]) == 0
    assert (tmp_path / "r-1.json").exists()


def test_run_a_module_with_dash_m(tmp_path, monkeypatch, capsys):
    pkg = tmp_path / "mytrainer"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text(TRAIN)
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--mode", "fix", "-m", "mytrainer", "5", "--epochs", "1"]) == 5
    assert "argv ['5', '--epochs', '1']" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["run", "nope.py"], ["run", "-m", "no_such_module_xyz"], ["run"]])
def test_bad_input_is_one_line_and_exit_2(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error:" in err and "Traceback" not in err


def test_python_dash_m_dtype_doctor_run_in_a_subprocess(script):
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.run(
        [sys.executable, "-m", "dtype_doctor", "run", "--no-color", str(script), "7"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1 and "mat1 and mat2" in proc.stderr
    assert "dtype-doctor run: 1 error, 1 warning" in proc.stderr


def test_numerics_flag_runs_with_fix_mode(script, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    code = main(["run", "--numerics", "--mode", "fix", str(script), "0"])
    captured = capsys.readouterr()
    assert code == 0 and "argv ['0']" in captured.out  # the fixed program ran to its end, numerics on
    assert (
        "silent-promotion" in captured.err and "fix mode: cast tensors[1] float32 -> float16" in captured.err
    )


HALF_TRAINING = textwrap.dedent(
    """\
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2)
    llm = LlamaForCausalLM(config).half()
    optimizer = torch.optim.AdamW(llm.parameters(), lr=1e-3)
    ids = torch.randint(0, 64, (1, 6))
    llm(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    """
)


def test_fp16_parameters_trained_without_master_weights_are_named_by_their_module_path(tmp_path, capsys):
    """Issue 32: under `run` (no model handed to the watch) the optimizer's fp16 parameters are
    named by their path in the model the script called, not `param 0`."""
    script = tmp_path / "train_half.py"
    script.write_text(HALF_TRAINING)
    report = tmp_path / "report.json"
    assert main(["run", "--json", str(report), str(script)]) == 0
    capsys.readouterr()
    (finding,) = [
        f for f in json.loads(report.read_text())["findings"] if f["code"] == "optimizer-state-dtype"
    ]
    assert "AdamW updates 12 of 12 parameters in float16 (model.embed_tokens.weight, " in finding["message"]
    assert "param 0" not in finding["message"]
    assert finding["operands"][0]["name"] == "model.embed_tokens.weight"
    assert finding["location"]["op"] == "AdamW.step"
    assert finding["location"]["file"].endswith("train_half.py") and finding["location"]["line"] == 10
