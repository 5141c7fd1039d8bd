"""The patch planner and its edits, without a replay: ast-position edits keep the user's formatting,
the clip-before-unscale and autocast rules, --write's safety checks, the SourcePatch renderers."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from dtype_doctor.editing.source import Source, add_kwarg, apply, cast_expr, unified_diff
from dtype_doctor.errors import DoctorError
from dtype_doctor.patching import plan
from dtype_doctor.patching.write import write_files
from dtype_doctor.render.console import make_console, render
from dtype_doctor.render.html import render_html
from dtype_doctor.report import Finding, Location, Operand, Origin, Report
from dtype_doctor.sections import SourcePatch


def _src(text: str) -> Source:
    return Source("x.py", textwrap.dedent(text))


def _call(src: Source) -> ast.Call:
    return next(n for n in ast.walk(src.tree) if isinstance(n, ast.Call))


def test_dtype_kwarg_goes_into_the_call_in_its_own_layout() -> None:
    src = _src(
        """\
        mask = torch.ones(  # the mask
            1, 16,
        )
        """
    )
    edit = add_kwarg(src, _call(src), "dtype", "torch.float16")
    assert apply(src.text, [edit]) == "mask = torch.ones(  # the mask\n    1, 16, dtype=torch.float16\n)\n"
    empty = _src("x = torch.empty()\n")
    assert apply(empty.text, [add_kwarg(empty, _call(empty), "dtype", "torch.bfloat16")]) == (
        "x = torch.empty(dtype=torch.bfloat16)\n"
    )
    assert (
        add_kwarg(
            _src("x = torch.ones(2, dtype=d)\n"), _call(_src("x = torch.ones(2, dtype=d)\n")), "dtype", "t"
        )
        is None
    )


def test_cast_parenthesises_what_is_not_an_atom_and_keeps_comments() -> None:
    src = _src("y = a * 2  # scaled\n")
    value = src.tree.body[0].value
    assert apply(src.text, [cast_expr(src, value, "float16")]) == "y = (a * 2).to(torch.float16)  # scaled\n"


def test_unified_diff_has_git_style_a_b_paths() -> None:
    diff = unified_diff("train.py", "a = 1\n", "a = 2\n")
    assert diff.splitlines()[:2] == ["--- a/train.py", "+++ b/train.py"]


def _report(*findings: Finding) -> Report:
    return Report(findings=list(findings), tool="run")


def test_autocast_around_a_half_model_is_removed_and_its_body_dedented(tmp_path: Path) -> None:
    path = tmp_path / "infer.py"
    path.write_text(
        "import torch\n\n"
        "with torch.autocast('cpu', dtype=torch.bfloat16):\n"
        "    # the UNet is .half() already\n"
        "    out = unet(x)\n"
        "print(out)\n"
    )
    finding = Finding(
        code="autocast-half-conflict",
        title="t",
        data={"your_code": f"{path}:5"},
        operands=[Operand("weight", "float16", origin=Origin("parameter", name="w", module="lin"))],
    )
    causes = plan(_report(finding))
    first = causes[0].candidates[0]
    assert first.title.startswith("remove the redundant torch.autocast")
    text = apply(path.read_text(), first.edits)
    assert text == "import torch\n\n# the UNet is .half() already\nout = unet(x)\nprint(out)\n"
    assert "enabled=False" in apply(path.read_text(), causes[0].candidates[1].edits)


LOOP = """\
import torch

for batch in data:
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # clip
    {unscale}scaler.step(opt)
    scaler.update()
"""


@pytest.mark.parametrize("has_unscale", [True, False])
def test_clip_before_unscale_moves_after_unscale_or_gets_one(tmp_path: Path, has_unscale: bool) -> None:
    path = tmp_path / "train.py"
    path.write_text(LOOP.format(unscale="scaler.unscale_(opt)\n    " if has_unscale else ""))
    finding = Finding(
        code="grad-scaler-misuse",
        title="t",
        location=Location(op="clip_grad_norm_", file=str(path), line=5),
        data={"misuse": "clip-before-unscale"},
    )
    cand = plan(_report(finding))[0].candidates[0]
    lines = apply(path.read_text(), cand.edits).splitlines()
    unscale = next(i for i, ln in enumerate(lines) if "scaler.unscale_(opt)" in ln)
    clip = next(i for i, ln in enumerate(lines) if "clip_grad_norm_" in ln)
    assert unscale < clip < next(i for i, ln in enumerate(lines) if "scaler.step(opt)" in ln)
    assert lines[clip] == "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # clip"


def test_library_files_are_never_edited() -> None:
    torch_file = ast.__file__  # a file of the standard library stands for any library
    origin = Origin("op", name="mask", op="torch.ones", file=torch_file, line=1, dtype="float32")
    finding = Finding(
        code="matmul-dtype-mismatch",
        title="t",
        operands=[Operand("input", "float32", origin=origin), Operand("weight", "float16")],
        data={"expected_dtype": "float16"},
    )
    assert plan(_report(finding)) == []


def test_write_refuses_a_file_changed_since_the_run(tmp_path: Path) -> None:
    path = tmp_path / "a.py"
    path.write_text("a = 1\n")
    with pytest.raises(DoctorError, match="changed since the run"):
        write_files({str(path): "a = 0\n"}, {str(path): "a = 2\n"})
    written = write_files({str(path): "a = 1\n"}, {str(path): "a = 2\n"}, backup=False)
    assert [w.path for w in written] == [str(path)] and path.read_text() == "a = 2\n"
    assert not (tmp_path / "a.py.orig").exists()


def test_the_patch_section_in_console_html_and_json() -> None:
    section = SourcePatch(
        diff=unified_diff("t.py", "m = torch.ones(2)\n", "m = torch.ones(2, dtype=torch.float16)\n"),
        files=["t.py"],
        changes=[{"cause": "float32 `m` made by torch.ones (t.py:1)", "change": "create `m` as float16"}],
        verified=True,
        outcome="re-run of the patched copy: exit 0, no dtype error",
    )
    report = Report(tool="run", sections=[section])
    console = make_console(color=False, width=60, record=True)
    render(report, console=console)
    text = console.export_text()
    assert "patch: 1 change to your files, verified by a re-run" in text
    assert "+m = torch.ones(2, dtype=torch.float16)\n" in text  # unwrapped, copyable
    html = render_html(report)
    assert '<span class="d-add">+m = torch.ones(2, dtype=torch.float16)</span>' in html
    assert Report.from_json(report.to_json()).sections == [section]


def test_patch_options_without_write_are_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from dtype_doctor.cli import main

    script = tmp_path / "s.py"
    script.write_text("print(1)\n")
    assert main(["run", "--no-backup", str(script)]) == 2
    assert "--no-backup and --force go with --write" in capsys.readouterr().err
    assert main(["check", f"{script}:build", "--force"]) == 2
