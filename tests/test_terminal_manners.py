"""Terminal manners (issue 32): nothing wider than the terminal, each diagnosis once per stream,
NO_COLOR / FORCE_COLOR / --no-color, --quiet, print(report) at the terminal's width, progress lines
in a CI log. Real commands in fresh interpreters (what a terminal or a log receives; compare's log in
this process, its stderr captured), real reports."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

from dtype_doctor import explain
from dtype_doctor.cli import main
from dtype_doctor.comparing.progress import ProgressEvent, line_progress
from dtype_doctor.render.fold import CONTINUED, fold_code_line
from dtype_doctor.report import Fix

ROOT = Path(__file__).resolve().parents[1]
MESSAGE = "mat1 and mat2 must have the same dtype, but got Float and Half"
COLOR = re.compile(r"\x1b\[[0-9;]*3[0-7]m|\x1b\[[0-9;]*38;")  # a foreground colour, not bold alone

SCRIPT = """
import torch
from torch import nn

model = nn.Sequential(nn.Linear(6, 8), nn.ReLU()).to(torch.bfloat16)
batch = torch.randn(4, 6)
out = model(batch)
"""


def _cli(*args: str, cwd: Path = ROOT, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "TERM")}
    environ.update(PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1", COLUMNS="80", **env)
    return subprocess.run(
        [sys.executable, "-m", "dtype_doctor", *args],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_long_code_line_is_folded_with_a_mark_and_joins_back():
    line = "    y = layer(x.float()).to(x.dtype)   # or transformers' _keep_in_fp32_modules, " + "z" * 60
    pieces = fold_code_line(line, 40)
    assert len(pieces) > 2 and all(len(piece) <= 40 for piece in pieces)
    assert all(piece.startswith("    " + CONTINUED) for piece in pieces[1:])
    assert pieces[0] + "".join(piece[len("    " + CONTINUED) :] for piece in pieces[1:]) == line
    assert fold_code_line("short", 40) == ["short"]


def test_print_report_is_drawn_at_the_terminal_width(monkeypatch):
    report = explain(MESSAGE)
    report.findings[0].fixes.insert(0, Fix("A long one", snippet="model = build(" + "arg, " * 40 + ")"))
    for width in (60, 100):
        monkeypatch.setenv("COLUMNS", str(width))
        lines = str(report).splitlines()
        assert max(len(line) for line in lines) == width  # the box spans the terminal, never more


def test_explain_at_80_columns_quiet_and_colours():
    plain = _cli("explain", MESSAGE)
    assert plain.returncode == 0 and "matmul-dtype-mismatch" in plain.stdout
    assert max(len(line) for line in plain.stdout.splitlines()) <= 80
    assert not COLOR.search(plain.stdout)  # a pipe: no colour
    assert COLOR.search(_cli("explain", MESSAGE, FORCE_COLOR="1").stdout)
    assert not COLOR.search(_cli("explain", MESSAGE, FORCE_COLOR="1", NO_COLOR="1").stdout)
    assert not COLOR.search(_cli("explain", MESSAGE, "--no-color", FORCE_COLOR="1").stdout)
    quiet = _cli("explain", "--quiet", MESSAGE)
    assert quiet.returncode == 0
    assert quiet.stdout.splitlines() == [quiet.stdout.strip()]  # one line: the finding
    assert quiet.stdout.startswith("matmul-dtype-mismatch [error] ")  # explain: no file:line to name


def test_run_shows_the_noted_diagnosis_once_on_stderr(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    done = _cli("run", "train.py", cwd=tmp_path)
    assert done.returncode == 1 and "RuntimeError: mat1 and mat2" in done.stderr
    err = done.stderr
    assert err.count("dtype-doctor [matmul-dtype-mismatch]") == 1  # the note, under the traceback
    note = err[err.index("dtype-doctor [matmul-dtype-mismatch]") : err.index("╭─")]
    # under run the note is brief (headline and place) and the box below is the one diagnosis
    assert "in dtype-doctor's report below" in " ".join(note.split()) and "fix:" not in note
    assert err.count("1. ERROR matmul-dtype-mismatch") == 1 and err.count("fix 1  ") == 1
    assert "dtype-doctor run: 1 error; raised RuntimeError" in err
    assert max(len(line) for line in note.splitlines()) <= 80
    # the JSON on stdout still holds the whole finding
    data = _cli("run", "--json", "train.py", cwd=tmp_path)
    assert '"code": "matmul-dtype-mismatch"' in data.stdout and '"fixes": [' in data.stdout


def test_progress_lines_for_a_log_are_throttled_and_end_with_the_last_step():
    out, now = io.StringIO(), [0.0]
    show = line_progress(out, every=5.0, clock=lambda: now[0])
    for done, (variant, stage) in enumerate([("fp32", "running"), ("fp16", "running"), ("bf16", "running")]):
        now[0] = done * 2.0  # 0 s, 2 s, 4 s: only the first is due
        show(ProgressEvent(done, 4, variant, stage))
    now[0] = 4.5
    show(ProgressEvent(4, 4, "fp32", "done"))  # the last step is always shown
    assert out.getvalue().splitlines() == [
        "dtype-doctor compare: 1/4 fp32: running",
        "dtype-doctor compare: 4/4 fp32: done",
    ]


def test_compare_writes_progress_lines_to_a_non_tty_stderr(capsys, monkeypatch):
    """In this process: its captured stderr is not a terminal, as a CI log's is not."""
    monkeypatch.setenv("COLUMNS", "80")
    models = f"{ROOT / 'tests' / 'compare_models.py'}:overflowing"
    main(["compare", models, "-i", "4x32", "-p", "fp32,fp16", "-n", "2", "--warmup", "0", "--no-keep"])
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.startswith("dtype-doctor compare: ")]
    assert lines and re.fullmatch(r"dtype-doctor compare: (\d+)/\1 fp32: done", lines[-1]), err
    assert max(len(line) for line in out.splitlines()) <= 80


def _on_a_terminal(*args: str, **env: str) -> bytes:
    """What `dtype-doctor ARGS` writes to a real terminal (a pty), colours as rich decides them."""
    import pty

    environ = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "TERM")}
    environ.update(PYTHONPATH=str(ROOT / "src"), COLUMNS="80", TERM="xterm-256color", **env)
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "dtype_doctor", *args], stdout=follower, stderr=follower, env=environ
    )
    os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    proc.wait(timeout=60)
    os.close(leader)
    return out


def test_no_color_and_no_color_flag_leave_no_escape_of_any_kind_on_a_terminal():
    assert b"\x1b[" in _on_a_terminal("explain", MESSAGE)  # the terminal gets colour and bold
    assert b"\x1b[" not in _on_a_terminal("explain", MESSAGE, NO_COLOR="1")
    assert b"\x1b[" not in _on_a_terminal("explain", "--no-color", MESSAGE, FORCE_COLOR="1")


def test_quiet_run_is_one_linter_line_per_finding_at_the_users_line(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    done = _cli("run", "--quiet", "--budget", "0", "train.py", cwd=tmp_path)
    lines = [ln for ln in done.stdout.splitlines() + done.stderr.splitlines() if "[error]" in ln]
    assert lines == [
        "train.py:7: matmul-dtype-mismatch [error] Matrix multiply operands have different dtypes"
    ], done.stderr[-2000:]


def test_the_console_script_launcher_is_never_the_users_code(tmp_path):
    # `dtype-doctor` as pip installs it: a launcher in the environment's scripts folder, whose frame
    # sits under every frame of the user's program (was: "your code" at .venv/bin/dtype-doctor:6)
    import sysconfig

    launcher = Path(sysconfig.get_paths()["scripts"]) / "dtype-doctor"
    if not launcher.exists():
        import pytest

        pytest.skip("no dtype-doctor console script in this environment")
    (tmp_path / "mm.py").write_text(SCRIPT)
    env = {**os.environ, "DTYPE_DOCTOR_BUDGET": "0", "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        [str(launcher), "run", "--json", "out.json", "mm.py"], cwd=tmp_path, env=env, capture_output=True
    )
    assert done.returncode == 1, done.stderr[-2000:]
    report = (tmp_path / "out.json").read_text()
    assert '"file": "mm.py"' in report and str(launcher.parent) not in report
