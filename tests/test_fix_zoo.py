"""The fp32-island / partially-converted zoo (tests/fix_zoo/): real library models, real bugs.

Each script fails as written. `dtype-doctor run` must put first a fix it verified by replaying the
failing call, and that fix, pasted at the script's `# FIX HERE` line, must make the script run.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("diffusers")

from dtype_doctor.causes import by_cause, group_by_cause
from dtype_doctor.watching.run import RunOptions, run_program

logging.getLogger("transformers").setLevel(logging.ERROR)
logging.getLogger("diffusers").setLevel(logging.ERROR)
ZOO = Path(__file__).resolve().parent / "fix_zoo"
CASES = sorted(p.stem for p in ZOO.glob("*.py"))
# what the top fix must say (the odd one out, named as the user's code names it)
EXPECT = {
    "lora_after_half": "for name, module in model.named_modules():",
    "controlnet_fp32": "controlnet.to(torch.float16)",
    "ip_adapter_fp32": "unet.named_modules()",
    "lang_adaptor_bf16": "runner.lang_adaptor.to(torch.bfloat16)",
    "head_after_half": "model.classifier.to(torch.float16)",
    "zeros_like_buffer": "noise_pred = noise_pred.to(torch.float16)",
    "rope_table_fp32": "cos, sin = cos.to(torch.float16), sin.to(torch.float16)",
    "vae_decode_fp32_latents": "latents = latents.to(torch.float16)",
}


def _run(path: Path) -> tuple[int, object]:
    cwd = os.getcwd()
    os.chdir(ZOO)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            return run_program(RunOptions(target=str(path), argv=[]))
    finally:
        os.chdir(cwd)


def _exec(source: str, path: Path) -> None:
    sys.path.insert(0, str(ZOO))
    try:
        exec(compile(source, str(path), "exec"), {"__name__": "__main__", "__file__": str(path)})
    finally:
        sys.path.remove(str(ZOO))


def test_every_case_has_an_expectation():
    assert set(CASES) == set(EXPECT)


@pytest.mark.parametrize("case", CASES)
def test_top_fix_is_verified_and_pasted_it_makes_the_script_run(case, tmp_path):
    path = ZOO / f"{case}.py"
    code, report = _run(path)
    assert code == 1, f"{case} must fail as written"
    report = group_by_cause(report)
    _cause, findings = by_cause(report)[0]
    top = findings[0].fixes[0]
    assert top.verified is True, (case, top.title, top.verification)
    assert top.verification.startswith("verified"), top.verification
    assert EXPECT[case] in top.snippet, (case, top.snippet)
    for finding in report.findings:  # a fix the replay shows failing is never offered first
        assert finding.fixes[0].verified is not False, (case, finding.fixes[0])
    source = path.read_text()
    assert "# FIX HERE\n" in source
    _exec(source.replace("# FIX HERE\n", top.snippet + "\n"), path)


def test_a_fix_that_replays_failing_says_so():
    _, report = _run(ZOO / "lang_adaptor_bf16.py")
    fixes = [x for f in report.findings for x in f.fixes]
    failing = [x for x in fixes if x.verified is False]
    assert failing and all(x.verification.startswith("fails: ") for x in failing)
    assert fixes[0].verified is True


def _names_at_fix_point(source: str, path: Path) -> set[str]:
    """The names the script has where a fix is pasted (its code before `# FIX HERE`, run)."""
    head = source.split("# FIX HERE\n")[0]
    g: dict = {"__name__": "__main__", "__file__": str(path)}
    sys.path.insert(0, str(ZOO))
    try:
        exec(compile(head, str(path), "exec"), g)
    finally:
        sys.path.remove(str(ZOO))
    return set(g) | {"torch", "nn"}


@pytest.mark.parametrize("case", CASES)
def test_every_fix_passes_the_static_check_and_executes(case):
    """Every Python fix of the case: parses, names only what the script has at the paste point, no
    refused autocast/glob/CUDA/no-op conversion; pasted, it executes (the run may still fail on
    dtypes only where the replay said so)."""
    from dtype_doctor.watching.snippets import refusal

    path = ZOO / f"{case}.py"
    _, report = _run(path)
    source = path.read_text()
    names = _names_at_fix_point(source, path)
    for fix in [x for f in report.findings for x in f.fixes if x.language == "python" and x.snippet]:
        if "inside the replayed call" in fix.verification:  # pasted in the user's forward, not here
            assert refusal(fix, "cpu", None) is None, (case, fix.snippet)
            continue
        assert refusal(fix, "cpu", names) is None, (case, refusal(fix, "cpu", names), fix.snippet)
        pasted = source.replace("# FIX HERE\n", fix.snippet + "\n")
        try:
            _exec(pasted, path)
        except (NameError, SyntaxError, AttributeError, TypeError) as exc:
            pytest.fail(f"{case}: {fix.title!r} does not execute: {exc!r}\n{fix.snippet}")
        except (RuntimeError, AssertionError) as exc:
            assert fix.verified is not True, (case, fix.title, fix.verification, exc)


def test_the_verification_reaches_json_html_and_console():
    from rich.console import Console

    from dtype_doctor.render.console import render
    from dtype_doctor.render.html import render_html
    from dtype_doctor.report import Report

    _, report = _run(ZOO / "controlnet_fp32.py")
    top = report.findings[0].fixes[0]
    assert top.verified is True and top.verification.startswith("verified: ")
    again = Report.from_json(report.to_json())
    assert again.findings[0].fixes[0].verified is True
    assert again.findings[0].fixes[0].verification == top.verification
    assert again.to_json() == report.to_json()
    assert top.verification in render_html(report)
    out = io.StringIO()
    render(group_by_cause(report), console=Console(file=out, width=200, no_color=True))
    assert top.verification in out.getvalue()
    island = report.findings[0].data["island"]
    assert island["model"] == "controlnet" and island["modules"] == [""] and island["built"].endswith(":9")
