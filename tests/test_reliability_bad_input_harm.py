"""Issue 22 items 20, 21, 23: bad input gets one line and exit 2 (or is handled), never an internal error."""

from __future__ import annotations

import os

import pytest

from cli_process import dtype_doctor

HERE = os.path.dirname(os.path.abspath(__file__))


def _one_line_error(p, words: str) -> None:
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "internal error" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], p.stderr


def test_check_input_whose_element_count_overflows():
    p = dtype_doctor("check", f"{HERE}/tiny_models.py:vit", "--input", "99999999999x99999999999")
    _one_line_error(p, "more than 2**63 - 1 elements")


def test_compare_seed_beyond_64_bits():
    p = dtype_doctor(
        "compare",
        f"{HERE}/compare_models.py:overflowing",
        "--input",
        "4x32",
        "--seed",
        "99999999999999999999",
    )
    _one_line_error(p, "--seed")


def _rank_report(path, depth: int = 1) -> None:
    from dtype_doctor.report import Report
    from dtype_doctor.sections import DtypeMap, ModuleDtypes

    report = Report(tool="audit")
    report.sections.append(
        DtypeMap(modules=[ModuleDtypes(path=".".join(["m"] * depth), type="Linear", dtypes={"float16": 2})])
    )
    path.write_text(report.to_json())


def test_merge_html_of_a_dtype_map_5000_levels_deep(tmp_path):
    _rank_report(tmp_path / "r.rank0.json", depth=5000)
    p = dtype_doctor("merge", str(tmp_path / "r.rank0.json"), "--html", str(tmp_path / "m.html"))
    assert p.returncode in (0, 1), p.stderr
    assert "internal error" not in p.stderr
    assert "<html" in (tmp_path / "m.html").read_text().lower()


@pytest.mark.parametrize("second", ["./good.json", "link.json"])
def test_merge_the_same_file_twice_is_one_rank(tmp_path, second):
    _rank_report(tmp_path / "good.json")
    (tmp_path / "link.json").symlink_to(tmp_path / "good.json")
    p = dtype_doctor("merge", "good.json", second, "--json=merged.json", cwd=tmp_path)
    assert p.returncode in (0, 1), p.stderr
    import json

    merged = json.loads((tmp_path / "merged.json").read_text())
    assert merged["meta"]["merged_from"] == ["good.json"]
    assert "read once" in p.stderr


def test_a_repeated_named_input_is_refused():
    """Item 23: `--input x=... --input x=...` would silently keep the last one."""
    p = dtype_doctor("check", f"{HERE}/tiny_models.py:vit", "--input", "pixel_values=1x3x32x32",
            "--input", "pixel_values=1x3x64x64")  # fmt: skip
    _one_line_error(p, "given twice")


def test_check_of_a_non_module_says_so_once():
    from dtype_doctor.checking.check import build_on_meta
    from dtype_doctor.errors import DoctorError

    with pytest.raises(DoctorError) as info:
        build_on_meta("a string")
    assert str(info.value) == "check needs a torch.nn.Module (or a factory of one), got str"


def test_20k_error_sites_are_not_counted_on_the_64th():
    """Item 23: past the tracing budget, occurrences are counted apart, not on the last traced place."""
    from dtype_doctor import explain

    tb = (
        "Traceback (most recent call last):\n"
        '  File "/home/u/train.py", line {i}, in step\n'
        "    out = model(x)\n"
        "RuntimeError: mat1 and mat2 must have the same dtype, but got Float and Half\n"
    )
    report = explain("".join(tb.format(i=i) for i in range(1, 20_001)))
    located = [f for f in report.findings if f.location is not None and f.location.line]
    assert located and max(f.count for f in located) == 1
    assert sum(f.count for f in report.findings) == 20_000


def test_ipython_line_magic_reads_quoted_options_as_the_cell_magic_does():
    import shlex

    from dtype_doctor.integrations.ipython import _split_line

    words, code = _split_line("--html 'a b.html' --mode fix model(x, 'a b')")
    assert words == shlex.split("--html 'a b.html' --mode fix") and code == "model(x, 'a b')"


def test_torch_compile_under_run_does_not_warn_about_the_tools_hooks(tmp_path):
    script = tmp_path / "comp.py"
    script.write_text(
        "import torch\nm = torch.nn.Linear(4, 4)\nprint(torch.compile(m, backend='eager')(torch.randn(2, 4)).shape)\n"
    )
    p = dtype_doctor("run", "--no-color", str(script))
    assert p.returncode == 0, p.stderr
    assert "global hooks" not in p.stderr
