"""The tool's own children never reach the program's SIGCHLD handler (issue 42, H13): a program
that handles SIGCHLD prints under `run` what it prints under python; one that ignores SIGCHLD keeps
its fixes' verdicts; a child of the program's own that ends while the tool has one still calls
the program's handler."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from dtype_doctor.verifying.child_signals import own_children

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}

PROGRAM = textwrap.dedent(
    """\
    import signal, torch
    from torch import nn
    signal.signal(signal.SIGCHLD, {handler})
    model = nn.Linear(4, 4).half()
    x = torch.randn(2, 4)
    print("start", flush=True)
    model(x)
    """
)


def _both(tmp_path: Path, handler: str, *flags: str) -> tuple[subprocess.CompletedProcess, ...]:
    (tmp_path / "prog.py").write_text(PROGRAM.format(handler=handler))
    run = lambda *cmd: subprocess.run(  # noqa: E731
        [sys.executable, *cmd], cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300
    )
    return run("prog.py"), run("-m", "dtype_doctor", "run", *flags, "prog.py")


def test_a_programs_sigchld_handler_sees_none_of_the_tools_children(tmp_path: Path) -> None:
    python, doctor = _both(tmp_path, 'lambda *a: print("SIGCHLD", flush=True)', "--json", "r.json")
    assert python.stdout == "start\n" and python.returncode == 1
    assert doctor.stdout == python.stdout, doctor.stdout  # the replays forked; git was asked
    assert doctor.returncode == python.returncode
    fixes = json.loads((tmp_path / "r.json").read_text())["findings"][0]["fixes"]
    assert fixes[0]["verified"] is True, fixes[0]


def test_a_program_that_ignores_sigchld_keeps_its_fixes_verdicts(tmp_path: Path) -> None:
    _, doctor = _both(tmp_path, "signal.SIG_IGN", "--json", "r.json")
    assert "ChildProcessError" not in doctor.stderr
    fixes = json.loads((tmp_path / "r.json").read_text())["findings"][0]["fixes"]
    assert fixes[0]["verified"] is True, fixes[0]


def test_the_programs_own_child_that_ends_meanwhile_still_calls_its_handler() -> None:
    seen: list[int] = []
    before = signal.signal(signal.SIGCHLD, lambda *a: seen.append(1))
    try:
        with own_children():
            theirs = subprocess.Popen(["true"])  # the program's child: not waited for here
            subprocess.run(["true"], check=True)  # the tool's, waited for
            time.sleep(0.2)
            assert seen == []  # neither ended into the handler while the tool had a child
        deadline = time.monotonic() + 5
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
        assert seen, "the program's child ended meanwhile: its handler must still run"
        theirs.wait()
        assert signal.getsignal(signal.SIGCHLD) is not signal.SIG_DFL  # the program's handler is back
    finally:
        signal.signal(signal.SIGCHLD, before)
