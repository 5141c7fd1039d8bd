"""What a new user trips on first (issue 20): each item as the user reads it."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from dtype_doctor.render.console import render
from dtype_doctor.report import Finding, Fix, Report

LONG = "mask = torch.zeros(..., dtype=torch.float16)  # the same call, with dtype= (or .to(torch.float16))"


def test_code_in_a_box_is_never_wrapped_onto_an_unindented_line(monkeypatch):
    """Pasted, a code line wrapped at the box's edge is a syntax error; a box as wide as its longest
    code line is wider than the terminal (issue 32): the rest of the line goes on marked lines."""
    report = Report(
        tool="watch",
        findings=[Finding(code="silent-promotion", title="t", fixes=[Fix("Make it", snippet=LONG)])],
    )
    buf = io.StringIO()
    render(report, console=Console(file=buf, width=80, no_color=True, highlight=False))
    lines = buf.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 80
    start = next(i for i, line in enumerate(lines) if "torch.zeros" in line)
    pieces = [lines[start].strip("│ ")]
    pieces += [line.strip("│ ")[2:] for line in lines[start + 1 :] if line.strip("│ ").startswith("↪ ")]
    assert "".join(pieces) == LONG
    assert not any(line.strip("│ ").startswith(".to(") for line in lines)
    monkeypatch.setenv("COLUMNS", "200")  # print(report) is drawn at the terminal's width
    assert LONG in str(report)


def test_compare_written_to_a_file_or_pipe_follows_COLUMNS(monkeypatch, capsys):
    from dtype_doctor.cli import main

    monkeypatch.setenv("COLUMNS", "70")
    models = f"{Path(__file__).parent / 'compare_models.py'}:overflowing"
    main(["compare", models, "-i", "4x32", "-p", "fp32,fp16", "-n", "2", "--warmup", "0", "--no-keep"])
    tables = [line for line in capsys.readouterr().out.splitlines() if not line.startswith(("╭", "│", "╰"))]
    assert "precision" in "".join(tables) or "precisi" in "".join(tables)
    assert max(map(len, tables)) <= 70


def test_merge_names_one_rank_as_a_rank():
    from dtype_doctor.processors import merge_ranks

    odd = Finding(code="matmul-dtype-mismatch", title="t", message="m")
    merged = merge_ranks([Report(tool="run", findings=[odd]), Report(tool="run")], [0, 1])
    (divergence,) = [f for f in merged.findings if f.code == "rank-divergence"]
    assert divergence.message.startswith("rank 0 hit ") and divergence.message.endswith("; rank 1 did not")
    merged = merge_ranks(
        [Report(tool="run", findings=[odd]) for _ in range(3)] + [Report(tool="run")], [0, 1, 2, 3]
    )
    (divergence,) = [f for f in merged.findings if f.code == "rank-divergence"]
    assert divergence.message.startswith("rank 3 did not hit ") and divergence.message.endswith(
        " that ranks 0, 1, 2 hit"
    )


def test_env_json_writes_null_not_a_dash(capsys):
    import json

    from dtype_doctor.cli import main

    main(["env", "--json"])
    text = capsys.readouterr().out
    assert "–" not in text
    assert json.loads(text)


def test_check_says_on_the_console_the_inputs_it_made_up(capsys):
    from dtype_doctor.cli import main

    main(["check", f"{Path(__file__).parent / 'tiny_models.py'}:llama", "--dtype", "float16", "--no-color"])
    assert "inputs made up (no --input given): input_ids=1x16:int64" in capsys.readouterr().out
