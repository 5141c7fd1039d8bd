"""Issue 22 items 20, 21, 23: bad input gets one line and exit 2 (or is handled), never an internal error."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
HERE = os.path.dirname(os.path.abspath(__file__))


def _dd(*args: str, cwd=None, env=None, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "dtype_doctor", *args],
        capture_output=True, text=True, env=env or ENV, cwd=cwd, timeout=timeout,
    )  # fmt: skip


def _one_line_error(p, words: str) -> None:
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "internal error" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], p.stderr


def test_check_input_whose_element_count_overflows():
    p = _dd("check", f"{HERE}/tiny_models.py:vit", "--input", "99999999999x99999999999")
    _one_line_error(p, "more than 2**63 - 1 elements")


def test_compare_seed_beyond_64_bits():
    p = _dd(
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
    p = _dd("merge", str(tmp_path / "r.rank0.json"), "--html", str(tmp_path / "m.html"))
    assert p.returncode in (0, 1), p.stderr
    assert "internal error" not in p.stderr
    assert "<html" in (tmp_path / "m.html").read_text().lower()


@pytest.mark.parametrize("second", ["./good.json", "link.json"])
def test_merge_the_same_file_twice_is_one_rank(tmp_path, second):
    _rank_report(tmp_path / "good.json")
    (tmp_path / "link.json").symlink_to(tmp_path / "good.json")
    p = _dd("merge", "good.json", second, "--json=merged.json", cwd=tmp_path)
    assert p.returncode in (0, 1), p.stderr
    import json

    merged = json.loads((tmp_path / "merged.json").read_text())
    assert merged["meta"]["merged_from"] == ["good.json"]
    assert "read once" in p.stderr
