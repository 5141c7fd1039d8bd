"""Bad input gives one clear line and exit 2: never a traceback, never an internal error."""

from __future__ import annotations

import io
import textwrap

import pytest

from dtype_doctor.cli import main
from dtype_doctor.commands import explain as explain_command

FACTORY = """
import torch
def build():
    return torch.nn.Linear(8, 8)
def lazy():
    return torch.nn.Sequential(torch.nn.LazyLinear(8), torch.nn.ReLU())
"""


@pytest.fixture
def models(tmp_path):
    path = tmp_path / "models.py"
    path.write_text(textwrap.dedent(FACTORY))
    return str(path)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["check", "{m}:build", "--input", "99999999999999999999x8"], "beyond 2**63 - 1"),
        (["numerics", "{m}:build", "--input", "2x8:complex64", "--steps", "1"], "ComplexFloat"),
        (["numerics", "{m}:build", "--input", "100000000000x8", "--steps", "1"], "cannot make input"),
        (["check", "{m}:lazy", "--input", "2x8"], "'0' (LazyLinear) has uninitialized lazy parameters"),
        (["audit", "{m}:lazy"], "'0' (LazyLinear) has uninitialized lazy parameters"),
    ],
    ids=["huge-dim", "complex-input", "unallocatable", "lazy-check", "lazy-audit"],
)
def test_bad_model_input_is_one_line(models, capsys, argv, needle):
    assert main([a.format(m=models) for a in argv]) == 2
    err = capsys.readouterr().err
    assert needle in err, err
    assert err.count("\n") == 1 and "internal error" not in err


def test_stdin_is_capped_like_files(monkeypatch, capsys):
    monkeypatch.setattr(explain_command, "MAX_BYTES", 64)
    stream = io.TextIOWrapper(io.BytesIO(b"x" * 65))
    monkeypatch.setattr("sys.stdin", stream)
    assert main(["explain", "-"]) == 2
    err = capsys.readouterr().err
    assert "standard input is larger than 64 bytes" in err and err.count("\n") == 1
