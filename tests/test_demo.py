"""The README's main job: the five seed cases run live, are diagnosed, and run after the fix."""

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

seed_cases = pytest.importorskip("seed_cases")
demo = pytest.importorskip("demo")

EXPECTED = {
    "onediff": ("mixed dtype (CPU)", {"autocast-half-conflict", "oneflow-infer-dtype"}),
    "xdit": ("expected scalar type Float but found Half", {"apex-conflict"}),
    "onetrainer": ("mat1 and mat2", {"silent-promotion", "matmul-dtype-mismatch"}),
    "cogvlm": ("bias type (float)", {"weight-bias-dtype-mismatch", "conv-bias-dtype-mismatch"}),
    "internlm_xcomposer": ("expected m1 and m2", {"matmul-dtype-mismatch"}),
}

# What the demo prints for the two cases whose library (OneFlow, apex) cannot run here: the live torch
# face and the explained real log must name the family, the place and the fix.
PRINTED = {
    "onediff": [
        "PyTorch said: RuntimeError: mixed dtype (CPU)",
        "ERROR autocast-half-conflict",
        "root cause a float16 model under bfloat16 torch.autocast (examples/seed_cases.py:",
        "dtype-doctor watch: 2 errors (1 cause)",
        "in 'time_embedding.linear_1' (Linear) at diffusers/models/embeddings.py:",
        "ERROR oneflow-infer-dtype",
        "fix Drop the redundant torch.autocast and keep the fp16 model",
        "Result of fix 1 (Use one precision tool: either the cast model without autocast, or an fp32 model "
        "with autocast): verified: passes, max rel. error",
    ],
    "xdit": [
        "ERROR apex-conflict ×2",
        "in 'final_layer_norm' at",
        "apex/normalization/fused_layer_norm.py:75 [rank0]",
        "fix Uninstall apex and fall back to PyTorch native AMP",
        "pip uninstall -y apex",
        "Result of fix 1 (Uninstall apex and fall back to PyTorch native AMP): not verified (not Python code",
        "Measured: dtype-doctor env on this machine: apex",
    ],
}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_seed_case_is_diagnosed_and_fixed(name):
    result = getattr(seed_cases, name)()
    said, codes = EXPECTED[name]
    assert said in result.user_error
    found = {f.code for _, report in result.reports for f in report.findings}
    assert codes <= found, found
    _, fix = result.first_fix()
    if name == "xdit":  # advice, not code: never run, and the environment it depends on is measured
        assert fix.verified is None and "apex" in result.facts
        return
    # the tool's own fix, replayed by the tool on the failing call: it passes, close to float32
    assert fix.verified, fix.verification
    error = float(re.search(r"max rel\. error (\S+) vs fp32", fix.verification)[1])
    assert error < 2e-2, fix.verification


@pytest.mark.parametrize("name", list(PRINTED))
def test_demo_prints_family_place_and_fix(name, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # one line per sentence: no wrapping inside what we look for
    assert demo.main([name]) == 0
    out = capsys.readouterr().out
    for line in PRINTED[name]:
        assert line in out, f"{line!r} not in the demo's output:\n{out}"


def test_make_demo_tells_the_five_cases_in_150_lines(capsys):
    import io

    from rich.console import Console

    demo = pytest.importorskip("demo")
    out = io.StringIO()
    assert demo.main([], console=Console(file=out, width=80, no_color=True, highlight=False)) == 0
    text = out.getvalue() + capsys.readouterr().err  # and what the libraries log
    assert len(text.splitlines()) <= 150, len(text.splitlines())
    assert text.count("Result of fix ") == len(EXPECTED)  # every case is told
    assert "latent_mask = latent_mask.to(torch.float16)" in text  # OneTrainer: cast where passed
    assert "image_embeds = image_embeds.to(torch.float16)" in text  # XComposer: the same
    # the four cases that run live show the fix the tool replayed and what its replay gave
    assert " ".join(text.split()).count("): verified: passes, max rel. error") == 4, text
    assert "Fix applied" not in text  # the demo applies nothing by hand
