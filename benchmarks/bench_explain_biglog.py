"""explain on big training logs: time and MB/s at 5, 25 and 50 MB (linear scan check).

The log is realistic noise (progress bars, loss lines, INFO/WARNING lines from several ranks)
with the five seed tracebacks spread through it, each repeated. Run:
    PYTHONPATH=src python benchmarks/bench_explain_biglog.py [--sizes 5 25 50]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from dtype_doctor import explain  # noqa: E402

LOGS = sorted((ROOT / "examples" / "logs").glob("*.log"))


def make_log(megabytes: float, seed: int = 0) -> str:
    rng = random.Random(seed)
    tracebacks = [p.read_text() for p in LOGS]
    target = int(megabytes * 1024 * 1024)
    parts: list[str] = []
    size = 0
    step = 0
    while size < target:
        step += 1
        rank = step % 4
        kind = rng.random()
        if kind < 0.55:
            line = (
                f"[rank{rank}]:{{'loss': {rng.uniform(0.1, 3):.4f}, 'grad_norm': {rng.uniform(0.1, 9):.3f}, "
                f"'learning_rate': {rng.uniform(1e-5, 3e-4):.2e}, 'epoch': {step / 1e4:.2f}}}\n"
            )
        elif kind < 0.8:
            line = f"step: {step % 1000:4d}/1000 [{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}<00:41, 2.31it/s, loss={rng.uniform(0, 2):.4f}, smooth loss={rng.uniform(0, 2):.4f}]\n"
        elif kind < 0.95:
            line = f"2024-05-02 14:31:{rng.randint(0, 59):02d},118 - INFO - modules.trainer - saved sample {step} to workspace/samples/{step:06d}.png (cfg=7.0, steps=20)\n"
        elif kind < 0.9995:
            line = f"W0709 08:12:44.118000 139870 torch/distributed/run.py:779] Setting OMP_NUM_THREADS ... rank {rank}\n"
        else:
            line = rng.choice(tracebacks)
        parts.append(line)
        size += len(line)
    return "".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=float, nargs="+", default=[5, 25, 50])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{'size':>8} {'median s':>9} {'MB/s':>7} {'findings':>9}  codes")
    for mb in args.sizes:
        text = make_log(mb)
        real_mb = len(text.encode()) / 1024 / 1024
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            report = explain(text)
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        counts = ", ".join(f"{f.code}×{f.count}" for f in report.findings)
        print(f"{real_mb:7.1f}M {med:9.2f} {real_mb / med:7.1f} {len(report.findings):9d}  {counts}")


if __name__ == "__main__":
    main()
