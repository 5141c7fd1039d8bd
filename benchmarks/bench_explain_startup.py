"""Whole-process time of `dtype-doctor explain` (cold interpreter each run), against `python -c pass`.

Budget (DESIGN.md): <= 0.3 s for the whole process; explain never imports torch. Run:
    PYTHONPATH=src python benchmarks/bench_explain_startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MSG = "RuntimeError: mat1 and mat2 must have the same dtype, but got Float and Half"
LOG = ROOT / "examples" / "logs" / "onetrainer.log"

COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "explain TEXT (console)": [sys.executable, "-m", "dtype_doctor", "explain", MSG, "--no-color"],
    "explain TEXT --json": [sys.executable, "-m", "dtype_doctor", "explain", MSG, "--json"],
    "explain --file onetrainer.log": [sys.executable, "-m", "dtype_doctor", "explain", "--file", str(LOG)],
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    cpu: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(args.runs):  # round-robin so that machine noise hits every command alike
        for name, cmd in COMMANDS.items():
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, check=False)
            times[name].append(time.perf_counter() - t0)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu[name].append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    base = statistics.median(times["python -c pass"])
    load = os.getloadavg()[0]
    print(
        f"{os.cpu_count()} CPUs, load average {load:.1f} (wall times inflate with load; CPU time much less)"
    )
    print(f"{'command':32} {'wall median':>11} {'wall min':>9} {'CPU median':>11} {'wall - python':>14}")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(
            f"{name:32} {med:10.3f}s {min(ts):8.3f}s {statistics.median(cpu[name]):10.3f}s {med - base:13.3f}s"
        )


if __name__ == "__main__":
    main()
