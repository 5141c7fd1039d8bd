"""`run` on failing programs, experiment included, against plain python on the same scripts.

For each pattern script (default: every 5th of ../shared/patterns), in a temporary copy: the wall
time of `python SCRIPT`, of `dtype-doctor run --budget 0 SCRIPT` (the watch alone) and of
`dtype-doctor run SCRIPT` (with the experiment and its default budget: 3x the run, at least 60 s);
then the median and worst ratio of each against plain python, and whether the experiment cured.

    PYTHONPATH=src python benchmarks/bench_experiment.py [--every 5] [--dir ../shared/patterns] [SCRIPT ...]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _timed(cmd: list[str], cwd: str) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    env.pop("DTYPE_DOCTOR_BUDGET", None)
    start = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, timeout=900, check=False)
    return time.perf_counter() - start


def measure(script: Path) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(script, tmp)
        name = script.name
        doctor = [sys.executable, "-m", "dtype_doctor", "run"]
        plain = _timed([sys.executable, name], tmp)
        watch = _timed([*doctor, "--budget", "0", name], tmp)
        full = _timed([*doctor, "--json=r.json", name], tmp)
        try:
            experiment = json.loads((Path(tmp) / "r.json").read_text())["meta"].get("experiment") or {}
        except (OSError, ValueError):
            experiment = {}
    return {"script": name, "python": plain, "watch": watch, "run": full, "experiment": experiment}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scripts", nargs="*", type=Path)
    ap.add_argument("--dir", type=Path, default=ROOT.parent / "shared" / "patterns")
    ap.add_argument("--every", type=int, default=5)
    args = ap.parse_args()
    scripts = args.scripts or sorted(args.dir.glob("p*.py"))[:: args.every]
    rows = []
    for script in scripts:
        row = measure(script)
        rows.append(row)
        e = row["experiment"]
        print(
            f"{row['script']:<48} python {row['python']:5.1f} s  watch {row['watch'] / row['python']:4.2f}x  "
            f"run {row['run'] / row['python']:5.2f}x  experiment: {e.get('tried', 0)} re-runs, "
            f"{'cured' if e.get('cured') else 'not cured' if e else 'none'}",
            flush=True,
        )
    for key in ("watch", "run"):
        ratios = [r[key] / r["python"] for r in rows]
        print(f"{key}: median {statistics.median(ratios):.2f}x, worst {max(ratios):.2f}x plain python")


if __name__ == "__main__":
    main()
