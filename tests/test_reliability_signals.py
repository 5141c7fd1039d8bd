"""Fault injection: `run` killed by SIGTERM or SIGINT at random points still leaves a whole report."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

SCRIPT = """
import torch
layer = torch.nn.Linear(4, 4).half()
print("ready", flush=True)
while True:
    try:
        layer(torch.randn(2, 4))  # float32 input, float16 weight: a mismatch on every step
    except RuntimeError:
        pass
"""

KILLS = 4  # a handful: each kill is a fresh interpreter importing torch


def _plain_signals() -> None:
    """The child starts as from a shell: SIGINT and SIGTERM at their defaults and unblocked, not
    with whatever disposition or mask the test process inherited or was left with (in the full
    serial suite the SIGINT child ignored the signal and the run never ended)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


@pytest.mark.skipif(not hasattr(signal, "SIGTERM") or os.name != "posix", reason="POSIX signals")
def test_run_killed_at_random_points_writes_a_valid_report(tmp_path):
    script = tmp_path / "loop.py"
    script.write_text(SCRIPT)
    rng = random.Random(20)  # seeded: a failure names its delay and reproduces
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for i in range(KILLS):
        sig = (signal.SIGTERM, signal.SIGINT)[i % 2]
        delay = rng.uniform(0.0, 0.5)
        out = tmp_path / f"report{i}.json"
        proc = subprocess.Popen(
            [sys.executable, "-m", "dtype_doctor", "run", f"--json={out}", "--no-color", str(script)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            preexec_fn=_plain_signals,
        )
        assert proc.stdout.readline() == b"ready\n"
        time.sleep(delay)
        proc.send_signal(sig)
        try:
            _, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()  # a hung run must not outlive the test
            proc.communicate()
            raise
        where = f"{sig.name} after {delay:.3f} s"
        assert proc.returncode in (130, 128 + signal.SIGTERM, -signal.SIGTERM), (where, proc.returncode, err)
        report = json.loads(out.read_text())  # whole: parses
        assert report["tool"] == "run", where
        codes = [f["code"] for f in report["findings"]]
        assert codes == ["matmul-dtype-mismatch"], (where, codes)
        said = "Ctrl-C (SIGINT)" if sig == signal.SIGINT else "SIGTERM"
        assert report["meta"]["interrupted"] == said, where  # the report says it is of a cut-short run
        if sig == signal.SIGTERM:
            assert b"Traceback" not in err, (where, err.decode())
        else:  # as python does: the program's KeyboardInterrupt traceback, none of the tool's frames
            assert b"\nKeyboardInterrupt\n" in err and b"dtype_doctor" not in err, (where, err.decode())
