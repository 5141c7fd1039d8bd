"""Run gen_autocast_table's measurement in worker processes, so that an op that kills its process
(a segfault in a CUDA kernel, an abort) costs that op, named, and not the run.

A worker (`gen_autocast_table.py --worker LOG`) appends one JSON line to LOG before each op
({"start": op}) and one with the op's result ({"op": op, "result": ...}). When a worker dies, the op
it started last is the one that killed it: `run` starts a new worker that skips the ops done and the
crashed ones. A worker that shows no progress for `stall` seconds, or outlives the budget, is killed
the same way (the op it was on named "timed out").
"""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any


def _why(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed its measuring process ({signal.Signals(-returncode).name})"
        except ValueError:
            return f"killed its measuring process (signal {-returncode})"
    return f"ended its measuring process (exit {returncode})"


def _read(log: Path, results: dict[str, Any], planned: set[str]) -> str | None:
    """Take the finished ops' results from `log` (and the ops it plans to measure); the op started last
    and not finished, if any."""
    started = None
    for line in log.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a line cut short by the crash
        if "ops" in entry:
            planned.update(entry["ops"])
        elif "start" in entry:
            started = entry["start"]
        elif "op" in entry:
            results[entry["op"]] = entry["result"]
            started = None
    return started


def _wait(proc: subprocess.Popen, log: Path, deadline: float, stall: float) -> int | None:
    """The worker's exit status; None when it was killed for the budget or for no progress."""
    size, moved = -1, time.monotonic()
    while True:
        try:
            return proc.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic()
        grown = log.stat().st_size
        if grown != size:
            size, moved = grown, now
        if now > deadline or now - moved > stall:
            proc.kill()
            proc.wait()
            return None


def run(argv: list[str], budget: float, stall: float = 120.0) -> tuple[dict[str, Any], dict[str, str]]:
    """Measure with workers `argv + ["--worker", LOG, "--skip", ...]` until one ends cleanly or the
    budget is spent: (op → result, op → why it is left out)."""
    results: dict[str, Any] = {}
    left_out: dict[str, str] = {}
    planned: set[str] = set()
    deadline = time.monotonic() + budget
    with tempfile.TemporaryDirectory(prefix="autocast-table-") as tmp:
        for attempt in itertools.count():
            log = Path(tmp) / f"worker{attempt}.jsonl"
            log.touch()
            proc = subprocess.Popen([*argv, "--worker", str(log), "--skip", *results, *left_out])
            code = _wait(proc, log, deadline, stall)
            current = _read(log, results, planned)
            if code == 0:
                break
            if current is None:  # the worker died before or between ops: nothing to blame
                raise RuntimeError(f"the measuring worker {_why(code or -signal.SIGKILL)} outside any op")
            left_out[current] = "timed out" if code is None else _why(code)
            if time.monotonic() > deadline:
                break
    for name in planned - set(results) - set(left_out):
        left_out[name] = "not reached within the budget"
    return results, left_out
