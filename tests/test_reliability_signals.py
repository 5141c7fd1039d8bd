"""Fault injection: `run` killed by SIGTERM or SIGINT at random points still leaves a whole report."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

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


def _start(script: Path, out: Path) -> subprocess.Popen:
    """`run` of the endless script (from this, the main, thread: `_plain_signals` runs in the child)."""
    return subprocess.Popen(
        [sys.executable, "-m", "dtype_doctor", "run", f"--json={out}", "--no-color", str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        preexec_fn=_plain_signals,
    )


def _kill(proc: subprocess.Popen, sig: signal.Signals, delay: float) -> tuple[int, bytes]:
    """`sig` sent `delay` seconds after the script said it is ready: the exit code and stderr."""
    if proc.stdout.readline() != b"ready\n":
        proc.kill()
        return proc.wait(), b"the script never said ready: " + proc.communicate()[1]
    time.sleep(delay)
    proc.send_signal(sig)
    try:
        return proc.wait(timeout=120), proc.communicate()[1]
    except subprocess.TimeoutExpired:
        proc.kill()  # a hung run must not outlive the test
        proc.communicate()
        raise


@pytest.mark.skipif(not hasattr(signal, "SIGTERM") or os.name != "posix", reason="POSIX signals")
def test_run_killed_at_random_points_writes_a_valid_report(tmp_path):
    script = tmp_path / "loop.py"
    script.write_text(SCRIPT)
    rng = random.Random(20)  # seeded: a failure names its delay and reproduces
    kills = [((signal.SIGTERM, signal.SIGINT)[i % 2], rng.uniform(0.0, 0.5)) for i in range(KILLS)]
    outs = [tmp_path / f"report{i}.json" for i in range(KILLS)]
    done = []
    with ThreadPoolExecutor(max_workers=2) as pool:  # two at a time: each run mostly imports torch
        for pair in (slice(i, i + 2) for i in range(0, KILLS, 2)):
            procs = [_start(script, out) for out in outs[pair]]
            done += pool.map(_kill, procs, *zip(*kills[pair], strict=True))
    for (sig, delay), out, (returncode, err) in zip(kills, outs, done, strict=True):
        where = f"{sig.name} after {delay:.3f} s"
        assert returncode in (130, -signal.SIGINT, 128 + signal.SIGTERM, -signal.SIGTERM), (
            where,
            returncode,
            err,
        )
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


SIGNALLED = """
import os, signal, sys, time, torch
y = torch.randn(2, 4).half() + torch.randn(2, 4)  # a silent promotion: a warning, worth an experiment
if sys.argv[1] == "term":
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)
raise KeyboardInterrupt
"""


@pytest.mark.skipif(os.name != "posix", reason="POSIX signals")
@pytest.mark.parametrize("how", ["term", "int"])
def test_run_ends_by_the_signal_as_python_does_and_tries_nothing_after_it(tmp_path, how):
    # H11: python dies by SIGTERM, and by SIGINT after an uncaught KeyboardInterrupt; `run` wrote
    # its report and then exited 143 / 130 instead, and went on to re-run a program the user stopped
    script = tmp_path / "signalled.py"
    script.write_text(SIGNALLED)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("DTYPE_DOCTOR_BUDGET", None)  # the default budget: an experiment would start if asked
    codes = []
    for prefix in ([sys.executable], [sys.executable, "-m", "dtype_doctor", "run", "--json", "r.json"]):
        done = subprocess.run(
            [*prefix, str(script), how], cwd=tmp_path, env=env, capture_output=True, timeout=300
        )
        codes.append(done.returncode)
    wanted = -signal.SIGTERM if how == "term" else -signal.SIGINT
    assert codes == [wanted, wanted], codes
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["meta"]["interrupted"] in ("SIGTERM", "Ctrl-C (SIGINT)")
    assert "experiment" not in report["meta"]
