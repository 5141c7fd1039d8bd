"""`--json` on stdout stays pure JSON when user code writes to fd 1 directly or through a subprocess."""

from __future__ import annotations

import json
import textwrap

import pytest

from dtype_doctor.cli import main

NOISE = """
import os, subprocess, sys
os.write(1, b"raw fd write\\n")
subprocess.run([sys.executable, "-c", "print('from a child process')"], check=True)
"""

FACTORY = (
    NOISE
    + """
import torch
def build():
    os.write(1, b"building\\n")
    return torch.nn.Linear(4, 4)
"""
)


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--json", "{script}"],
        ["check", "{factory}:build", "--input", "2x4", "--json"],
        ["numerics", "{factory}:build", "--input", "2x4", "--steps", "1", "--json"],
        ["audit", "{factory}:build", "--json"],
    ],
    ids=["run", "check", "numerics", "audit"],
)
def test_fd_level_writes_go_to_stderr(tmp_path, capfd, argv):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(NOISE))
    factory = tmp_path / "factory.py"
    factory.write_text(textwrap.dedent(FACTORY))
    argv = [a.format(script=script, factory=factory) for a in argv]
    main(argv)
    out, err = capfd.readouterr()
    report = json.loads(out)  # nothing but the report on stdout
    assert report["tool"] == argv[0]
    assert "raw fd write" in err and "from a child process" in err
    print("after")  # stdout is restored once the command returned
    assert capfd.readouterr().out == "after\n"
