"""One cause per root origin: findings that share where the wrong dtype came from are told once,
with their consequences folded under it; a dtype crash is a finding; summaries count what raised."""

from __future__ import annotations

import inspect
import io
import json
import logging

import pytest
import torch
from rich.console import Console
from torch import nn

import tiny_models
from dtype_doctor import watch
from dtype_doctor.causes import by_cause, group_by_cause
from dtype_doctor.errors import DtypeMismatchError
from dtype_doctor.processors import present
from dtype_doctor.render.console import render, summary_text
from dtype_doctor.report import Finding, Report, Severity

transformers = pytest.importorskip("transformers")
pytest.importorskip("diffusers")
logging.getLogger("transformers").setLevel(logging.ERROR)
logging.getLogger("diffusers").setLevel(logging.ERROR)

H = torch.float16


def here() -> int:
    return inspect.currentframe().f_back.f_lineno


def _console_text(report: Report) -> str:
    buf = io.StringIO()
    render(present(report), console=Console(file=buf, width=100, no_color=True, highlight=False))
    return buf.getvalue()


@pytest.fixture(scope="module")
def text_to_unet():
    """An fp32 CLIP text encoder's output fed to an fp16 UNet (fix mode: it runs to the end)."""
    config = transformers.CLIPTextConfig(
        vocab_size=64, hidden_size=32, intermediate_size=37, num_hidden_layers=1,
        num_attention_heads=4, max_position_embeddings=16,
    )  # fmt: skip
    torch.manual_seed(0)
    text_encoder = transformers.CLIPTextModel(config).eval()
    unet = tiny_models.unet().eval().half()
    with watch(model=unet, mode="fix") as s, torch.no_grad():
        cond = text_encoder(torch.tensor([[1, 5, 7]])).last_hidden_state
        line = here() - 1
        unet(torch.randn(1, 4, 16, 16, dtype=H), 3, encoder_hidden_states=cond)
    return s.report, line


def test_findings_that_share_the_text_encoder_output_are_one_cause(text_to_unet):
    report, line = text_to_unet
    grouped = group_by_cause(report)
    assert len(grouped.findings) == len(report.findings)  # JSON keeps every finding
    ehs = [f for f in grouped.findings if any(o.name == "encoder_hidden_states" for o in f.operands)]
    assert len(ehs) >= 2, [(f.code, f.location.module) for f in grouped.findings]
    causes = {f.root_cause for f in ehs}
    assert len(causes) == 1, causes
    (cause,) = causes
    assert cause.startswith("float32 `encoder_hidden_states`"), cause
    assert f"made by CLIPTextModel at tests/test_causes.py:{line}" in cause, cause
    assert f"→ {sum(f.count for f in ehs)} findings in {len(ehs)} places" in cause, cause


def test_console_shows_each_cause_once_with_its_consequences_folded(text_to_unet):
    report, _ = text_to_unet
    text = _console_text(report)
    groups = by_cause(group_by_cause(report))
    assert len(groups) < len(report.findings)
    assert text.count("root cause  float32 `encoder_hidden_states`") == 1, text
    assert text.count("  also ") == sum(min(len(fs) - 1, 3 if len(fs) > 5 else 4) for _, fs in groups)
    assert "(+4 more of this cause: -v)" in text
    assert "cond = cond.to(torch.float16)" in text  # the fix at the root, first
    n = len(groups)
    assert text.splitlines()[-1].endswith(f"({n} cause{'s' if n != 1 else ''})")
    narrow = io.StringIO()
    render(present(report), console=Console(file=narrow, width=50, no_color=True, highlight=False))
    words = set(narrow.getvalue().replace("│", " ").split())
    for f in report.findings:  # titles wrap at word boundaries, never cut mid-word
        assert set(f.title.split()) <= words, f.title


def test_json_keeps_root_cause_and_old_reports_without_it_still_read(text_to_unet):
    report, _ = text_to_unet
    data = json.loads(group_by_cause(report).to_json())
    assert all("root_cause" in f for f in data["findings"])
    assert any(f["root_cause"] for f in data["findings"])
    for f in data["findings"]:
        f.pop("root_cause")
        for fix in f["fixes"]:
            fix.pop("language")
    old = Report.from_dict(data)
    assert all(f.root_cause is None for f in old.findings)
    assert all(x.language in ("python", "shell") for f in old.findings for x in f.fixes)


def test_a_dtype_crash_inside_a_fused_op_is_an_error_finding_and_the_summary_says_it_raised():
    mha = nn.MultiheadAttention(8, 2, batch_first=True).half().eval()
    with pytest.raises(RuntimeError, match="mat1 and mat2") as err, watch() as s, torch.no_grad():
        query = torch.randn(1, 3, 8)
        line = here() + 1
        mha(query, query, query)
    errors = s.report.errors
    assert [f.code for f in errors] == ["matmul-dtype-mismatch"], s.report.findings
    assert "raised: mat1 and mat2" in errors[0].message
    assert errors[0].location.line == line
    assert "matmul-dtype-mismatch" in err.value.__notes__[0]
    assert summary_text(s.report).endswith("; raised RuntimeError")
    assert "1 error" in summary_text(s.report)


def test_strict_mode_summary_counts_the_mismatch_it_raised():
    layer = nn.Linear(4, 4)
    with pytest.raises(DtypeMismatchError), watch(model=layer, mode="strict") as s:
        layer(torch.randn(2, 4) * torch.ones(4, dtype=H))  # a silent promotion in user code
    assert s.report.findings[0].code == "silent-promotion"
    assert summary_text(s.report) == "dtype-doctor watch: 1 warning; raised DtypeMismatchError"


def test_a_crash_no_watched_op_saw_becomes_an_error_finding():
    with pytest.raises(RuntimeError) as err, watch() as s:
        raise RuntimeError("expected scalar type Half but found Float")
    assert [f.severity.value for f in s.report.findings] == ["error"]
    assert s.report.findings[0].location.file == "tests/test_causes.py"
    assert str(err.value) == "expected scalar type Half but found Float"


def test_html_shows_each_cause_first_and_keeps_every_finding_linkable(text_to_unet):
    from dtype_doctor.render.html import render_html

    report, _ = text_to_unet
    page = render_html(present(report))
    groups = by_cause(group_by_cause(report))
    assert page.count('class="root-cause"') == sum(1 for cause, _ in groups if cause)
    assert page.count('<details class="folded">') == sum(1 for _, fs in groups if len(fs) > 1)
    first_cause = page.index('class="root-cause"')
    assert first_cause < page.index('<details class="folded">')
    for i in range(1, len(report.findings) + 1):  # the module tree links to every finding
        assert f'id="finding-{i}"' in page
    assert 'class="language-python"' in page


def test_fix_mode_says_the_casts_it_applied_were_verified_by_the_run(text_to_unet):
    report, _ = text_to_unet
    assert report.findings and all(
        f.data["verified"] == f"runs: fix mode applied '{f.data['action']}' and the block completed"
        for f in report.findings
    )
    assert "verified  runs: fix mode applied 'cast input float32 -> float16'" in _console_text(report)


def test_check_of_a_unet_with_one_fp32_input_is_one_cause():
    import dtype_doctor as dd

    unet = tiny_models.unet().eval()
    ehs = torch.randn(1, 5, 32, dtype=H)
    report = dd.check(unet, torch.randn(1, 4, 16, 16), 3, encoder_hidden_states=ehs, dtype=H)
    groups = by_cause(group_by_cause(report))
    assert len(report.errors) >= 2 and len(groups) == 1, [(f.code, f.location.module) for f in report.errors]
    assert groups[0][0].startswith("float32 `sample`")
    assert report.errors[0].data["verified"].endswith("the dry run on meta completed (dtypes only)")


def test_audit_of_a_half_converted_vit_tells_the_bias_pattern_once():
    import dtype_doctor as dd

    model = tiny_models.vit(image_size=32, num_hidden_layers=2, num_attention_heads=4)
    for name, p in model.named_parameters():
        if not name.endswith("bias"):
            p.data = p.data.half()
    report = dd.audit(model)
    mixed = [f for f in report.findings if f.code == "weight-bias-dtype-mismatch"]
    assert len(mixed) > 3
    text = _console_text(report)
    assert text.count("weight-bias-dtype-mismatch") == 1 + min(len(mixed) - 1, 3)  # head + 3 folded
    assert f"bias float32 next to weight float16 in {sum(f.count for f in mixed)} modules" in text


def test_run_json_names_the_shared_root_cause_of_every_finding(tmp_path, capsys, monkeypatch):
    from dtype_doctor.cli import main

    monkeypatch.chdir(tmp_path)  # file names are shown relative to the working directory

    script = tmp_path / "train.py"
    script.write_text(
        "import torch\nfrom torch import nn\n"
        "model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4)).half()\n"
        "bias = torch.zeros(2, 2)\n"  # line 4: the fp32 tensor
        "x = torch.cat([torch.randn(2, 2, dtype=torch.float16), bias], 1)\n"
        "model(x)\n"
    )
    path = tmp_path / "r.json"
    assert main(["run", "--json", str(path), str(script)]) == 1
    findings = json.loads(path.read_text())["findings"]
    assert len(findings) == 2
    assert {f["root_cause"] for f in findings} == {
        "float32 `bias` made by torch.zeros (train.py:4) → 2 findings (torch.cat, '0')"
    }
    assert "(1 cause); raised RuntimeError" in capsys.readouterr().err


def test_an_info_is_not_counted_as_a_cause():
    """The CogVLM demo said "10 errors, 1 info (2 causes)" for one cause: the info dtype map counted."""
    errors = [
        Finding(code="matmul-dtype-mismatch", title="t", message=str(i), root_cause="vision.proj")
        for i in range(3)
    ]
    info = Finding(code="dtype-map", title="map", severity=Severity.INFO)
    report = Report(tool="watch", findings=[*errors, info])
    assert summary_text(report) == "dtype-doctor watch: 3 errors, 1 info (1 cause)"
