"""`env --html` holds the env tables; a Report prints readably; undecodable text does not break --html."""

from __future__ import annotations

import io

from rich.console import Console

from dtype_doctor import catalog
from dtype_doctor.cli import main
from dtype_doctor.report import Location, Operand, Report

MSG = "mat1 and mat2 must have the same dtype, but got Float and Half"


def test_env_html_holds_the_env_tables(tmp_path, capsys):
    path = tmp_path / "env.html"
    main(["env", "--html", str(path)])
    page = path.read_text()
    for title in ("software", "CPU", "autocast", "libraries that change precision"):
        assert f"<h2>{title}</h2>" in page, title
    assert "torch kernels" in page and "float32 matmul precision" in page


def test_print_report_reads_like_the_console():
    report = Report(tool="run")
    report.add(
        catalog.finding(
            "matmul-dtype-mismatch",
            message=MSG,
            location=Location(module="encoder.0", module_type="Linear", op="linear", file="train.py", line=7),
            operands=[Operand(role="input", dtype="float32"), Operand(role="weight", dtype="float16")],
        )
    )
    text = str(report)
    assert "matmul-dtype-mismatch" in text and "in 'encoder.0' (Linear) at train.py:7" in text
    assert "Finding(" not in text and "Report(" not in text
    assert "fix 1" in text and "dtype-doctor run: 1 error" in text
    buf = io.StringIO()
    Console(file=buf, width=110, no_color=True).print(report)  # rich draws it through __rich__
    assert "in 'encoder.0' (Linear) at train.py:7" in buf.getvalue()


def test_undecodable_bytes_in_text_with_html(tmp_path, capsys):
    path = tmp_path / "out.html"
    text = MSG.replace("dtype", "dtype \udcff\udcfe")  # what Python makes of invalid UTF-8 in argv
    assert main(["explain", text, "--html", str(path), "--no-color"]) == 0
    assert "internal error" not in capsys.readouterr().err
    assert "matmul-dtype-mismatch" in path.read_text(encoding="utf-8")
