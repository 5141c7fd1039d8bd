"""Issue 22 item 14 (all but explain's float8 families): run reads a TorchScript error as explain
does, check says a float8 Linear has no CUDA kernel, and an op that raised reports no promotion."""

from __future__ import annotations

import json
import os

import pytest

torch = pytest.importorskip("torch")

import dtype_doctor as dd  # noqa: E402
from cli_process import dtype_doctor  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def test_torchscript_matmul_error_under_run_is_the_matmul_family_with_operands(tmp_path):
    script = tmp_path / "ts.py"
    script.write_text(
        "import torch\n@torch.jit.script\ndef f(a, b):\n    return a @ b\n"
        "f(torch.randn(2, 2), torch.randn(2, 2).half())\n"
    )
    p = dtype_doctor("run", "--json=r.json", "--no-color", str(script), cwd=tmp_path)
    assert p.returncode == 1
    findings = json.loads((tmp_path / "r.json").read_text())["findings"]
    assert findings[0]["code"] == "matmul-dtype-mismatch"
    assert {o["dtype"] for o in findings[0]["operands"]} == {"float32", "float16"}
    assert findings[0]["location"]["line"] == 5


def test_check_float8_says_the_linear_layers_have_no_kernel():
    p = dtype_doctor(
        "check", f"{HERE}/tiny_models.py:vit", "--dtype", "float8_e4m3fn", "--json", "--no-color"
    )
    assert p.returncode == 1, p.stderr
    found = [f for f in json.loads(p.stdout)["findings"] if f["code"] == "half-unsupported-kernel"]
    assert found and "float8_e4m3fn" in found[0]["message"] and "_scaled_mm" in found[0]["message"]
    assert found[0]["count"] > 1


def test_a_sparse_mm_that_raised_reports_no_silent_promotion():
    a, b = torch.eye(3).to_sparse(), torch.ones(3, 3, dtype=torch.float16)
    with dd.watch() as session, pytest.raises(RuntimeError):
        torch.sparse.mm(a, b)
    assert "silent-promotion" not in session.report.codes()
