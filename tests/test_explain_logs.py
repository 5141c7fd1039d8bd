"""The five seed cases (shared/CASES.md) from their logs: family, location, ranks, and the
fixes that worked for them, best first."""

from __future__ import annotations

from pathlib import Path

import pytest

from dtype_doctor import explain

LOGS = Path(__file__).resolve().parents[1] / "examples" / "logs"


def _explain(name):
    path = LOGS / name
    return explain(path.read_bytes(), source=str(path))


def _titles(finding, n=None):
    return [f.title.lower() for f in finding.fixes][:n]


def test_all_five_seed_logs_are_there():
    assert {p.name for p in LOGS.glob("*.log")} >= {
        "onediff.log", "xdit.log", "onetrainer.log", "cogvlm.log", "internlm_xcomposer.log",
    }  # fmt: skip


def test_onediff_drop_autocast_then_oneflow_autocast():
    report = _explain("onediff.log")
    assert report.codes() == ["oneflow-infer-dtype"]
    f = report.findings[0]
    assert {o.role: o.dtype for o in f.operands} == {"expected": "float32", "found": "float16"}
    fixes = _titles(f)
    assert "drop the redundant torch.autocast" in fixes[0]
    assert "oneflow" in fixes[1]
    assert "never mix precision tools of two frameworks" in fixes[2]
    assert f.location.module == "unet"  # the diffusers call, not OneFlow's graph plumbing
    assert "autocast" in f.data["context"]


def test_xdit_apex_uninstall_first_and_ranks_folded():
    report = _explain("xdit.log")
    assert report.codes() == ["apex-conflict"]
    f = report.findings[0]
    assert f.data["refined_from"] == "scalar-type-mismatch"
    assert "uninstall apex" in _titles(f)[0]
    assert "check library versions" in _titles(f)[1]
    assert "explicit dtype checks" in _titles(f)[2]
    assert f.count == 2 and f.data["ranks"] == [0, 1]
    assert f.location.module == "final_layer_norm" and f.location.rank == 0
    assert "fused_layer_norm.py" in f.location.file


def test_onetrainer_three_errors_one_policy_first():
    report = _explain("onetrainer.log")
    assert report.codes() == [
        "matmul-dtype-mismatch",
        "conv-weight-dtype-mismatch",
        "conv-bias-dtype-mismatch",
    ]
    linear, conv, vae = report.findings
    assert {o.role: o.dtype for o in linear.operands} == {"input": "float32", "weight": "float16"}
    assert linear.location.module == "linear_1" and linear.location.line == 1063
    assert {o.role: o.dtype for o in conv.operands} == {
        "input": "float16",
        "weight": "float32",
    }  # torch.cuda.*Tensor
    assert {o.role: o.dtype for o in vae.operands} == {
        "input": "float32",
        "bias": "float16",
    }  # struct c10::Half
    assert vae.location.module == "post_quant_conv" and vae.location.function == "_decode"
    for f in report.findings:
        fixes = _titles(f, 3)
        assert "one dtype policy" in fixes[0]
        assert "cast at the seam" in fixes[1]
        assert "explicit dtype" in fixes[2]
        assert "multi-error" in f.data["context"]


def test_cogvlm_four_ranks_one_finding_one_precision_first():
    report = _explain("cogvlm.log")
    assert report.codes() == ["conv-bias-dtype-mismatch"]
    f = report.findings[0]
    assert f.count == 4 and f.data["ranks"] == [0, 1, 2, 3]
    assert {e.text.split("]")[0] for e in f.evidence if e.text.startswith("[rank")} == {
        "[rank0", "[rank1", "[rank2", "[rank3",
    }  # fmt: skip
    assert {o.role: o.dtype for o in f.operands} == {"input": "float16", "bias": "float32"}
    assert f.location.module == "proj" and f.location.file.endswith("eva_clip_L_hf.py")
    fixes = _titles(f, 3)
    assert "whole model in one precision" in fixes[0] and "--fp16" in fixes[0]
    assert "fragile layers in float32 deliberately" in fixes[1]
    assert "test precision and speed" in fixes[2]


def test_internlm_xcomposer_autocast_then_cast_input_then_fp32():
    report = _explain("internlm_xcomposer.log")
    assert report.codes() == ["matmul-dtype-mismatch"]
    f = report.findings[0]
    assert {o.role: o.dtype for o in f.operands} == {"input": "float32", "weight": "float16"}
    assert f.location.module == "vision_proj" and f.location.function == "img2emb"
    fixes = _titles(f, 3)
    assert "autocast" in fixes[0]
    assert "cast at the seam" in fixes[1]
    assert "load the model in float32" in fixes[2]


@pytest.mark.parametrize(
    "name", ["onediff.log", "xdit.log", "onetrainer.log", "cogvlm.log", "internlm_xcomposer.log"]
)
def test_evidence_points_at_the_error_line(name):
    path = LOGS / name
    lines = path.read_text().splitlines()
    for f in _explain(name).findings:
        ev = f.evidence[0]
        assert ev.source == str(path)
        assert lines[ev.line - 1].strip() == ev.text


TB = """Traceback (most recent call last):
  File "/work/{name}.py", line {line}, in forward
    h = self.{attr}(x)
  File "/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py", line 134, in forward
    return F.linear(input, self.weight, self.bias)
RuntimeError: mat1 and mat2 must have the same dtype, but got Float and Half
"""


def test_same_text_at_two_places_is_two_findings_and_a_logged_repeat_folds():
    log = (
        TB.format(name="unet", line=10, attr="time_proj")
        + "ERROR train: RuntimeError: mat1 and mat2 must have the same dtype, but got Float and Half\n"
        + TB.format(name="text_encoder", line=77, attr="proj")
    )
    report = explain(log)
    assert [(f.location.module, f.count) for f in report.findings] == [("time_proj", 2), ("proj", 1)]


def test_a_big_noisy_log_finds_the_one_error_and_its_line():
    noise = "".join(
        f"step {i} | loss 1.{i % 97:02d} | lr 1e-4 | info: saved checkpoint\n" for i in range(40000)
    )
    log = noise + TB.format(name="model", line=5, attr="out") + noise
    report = explain(log)
    assert report.codes() == ["matmul-dtype-mismatch"]
    f = report.findings[0]
    assert f.evidence[0].line == 40000 + 6
    assert f.location.module == "out" and f.location.line == 5
