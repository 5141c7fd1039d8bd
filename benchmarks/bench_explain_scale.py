"""explain on inputs of any size: whole-process wall time and peak RSS (issue 22, item 17).

Each case runs `dtype-doctor explain --file F --json=OUT` (or reads stdin) in a fresh process and
reports its wall time and its peak resident memory (ru_maxrss). Targets: 100k clean `bf16` lines
<= 2 s; a 1 GB log <= 20 s and <= 200 MB; < 200 MB on any input. Run:
    PYTHONPATH=src python benchmarks/bench_explain_scale.py [--gb 1] [--line-mb 200] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_explain_biglog import make_log  # noqa: E402

RUNNER = (
    "import resource, sys\n"
    "from dtype_doctor.cli import main\n"
    "rc = main(sys.argv[1:])\n"
    "r = resource.getrusage(resource.RUSAGE_SELF)\n"
    "print('RSS_KB', r.ru_maxrss, r.ru_utime + r.ru_stime, file=sys.stderr)\n"
    "sys.exit(rc)\n"
)


def write_bf16_lines(path: Path, n: int = 100_000) -> None:
    with open(path, "w") as fh:
        for i in range(n):
            fh.write(
                f"step {i:6d} | loss {1 + (i % 97) / 100:.4f} | precision=bf16 | lr 1.0e-04 | it/s 2.31\n"
            )


def write_big_log(path: Path, gigabytes: float) -> None:
    """The biglog benchmark's realistic log (progress, losses, ranks, the five seed tracebacks), repeated."""
    block = make_log(16).encode()  # 16 MB, shifted each time so that the text is not periodic
    target = int(gigabytes * 1024**3)
    rng = random.Random(0)
    with open(path, "wb") as fh:
        written = 0
        while written < target:
            cut = rng.randrange(len(block) // 2)
            piece = block[cut:] + block[:cut]
            fh.write(piece[: target - written])
            written += len(piece)


def write_one_line(path: Path, megabytes: int) -> None:
    unit = b"x = torch.zeros(8, dtype=torch.bfloat16) bf16 loss=0.31 "
    with open(path, "wb") as fh:
        for _ in range(megabytes):
            fh.write((unit * (1024 * 1024 // len(unit) + 1))[: 1024 * 1024])


def run(args: list[str], stdin: int | None = None) -> tuple[float, float, float, int, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    t0 = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-c", RUNNER, *args],
        env=env,
        stdin=stdin,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - t0
    rss, cpu = next(
        (
            (int(line.split()[1]), float(line.split()[2]))
            for line in p.stderr.splitlines()
            if line.startswith("RSS_KB")
        ),
        (0, 0.0),
    )
    err = next((line for line in p.stderr.splitlines() if "error" in line), "")
    return wall, cpu, rss / 1024, p.returncode, err


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gb", type=float, default=1.0, help="size of the big log (GB)")
    parser.add_argument("--line-mb", type=int, default=200, help="size of the one-line input (MB)")
    parser.add_argument("--keep", type=Path, help="write the inputs here (default: a temporary folder)")
    args = parser.parse_args()
    tmp = args.keep or Path(tempfile.mkdtemp(prefix="bench_explain_"))
    tmp.mkdir(parents=True, exist_ok=True)
    out = tmp / "out.json"
    bf16, big, line = tmp / "bf16.log", tmp / "big.log", tmp / "line.log"
    write_bf16_lines(bf16)
    write_big_log(big, args.gb)
    write_one_line(line, args.line_mb)
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; python {sys.version.split()[0]}")
    print("wall inflates with the machine's load; CPU time (user + system) much less")
    print(f"{'case':34} {'size':>9} {'wall s':>8} {'CPU s':>7} {'peak RSS MB':>12} {'exit':>5}")
    cases = [
        ("100k clean bf16 lines", bf16, ["explain", "--file", str(bf16), f"--json={out}"], None),
        (f"{args.gb:g} GB log", big, ["explain", "--file", str(big), f"--json={out}"], None),
        (f"one {args.line_mb} MB line", line, ["explain", "--file", str(line), f"--json={out}"], None),
        ("/dev/zero on stdin (refused)", None, ["explain", "-"], "/dev/zero"),
        (
            "`explain TEXT` (start-up)",
            None,
            ["explain", "mat1 and mat2 must have the same dtype", "--json"],
            None,
        ),
    ]
    for name, path, argv, stdin_path in cases:
        size = f"{path.stat().st_size / 1e6:.1f} MB" if path else "-"
        if stdin_path:
            with open(stdin_path, "rb") as fh:
                wall, cpu, rss, rc, err = run(argv, stdin=fh.fileno())
        else:
            wall, cpu, rss, rc, err = run(argv)
        print(f"{name:34} {size:>9} {wall:8.2f} {cpu:7.2f} {rss:12.1f} {rc:5d}  {err[:60]}")
    if not args.keep:
        for p in (bf16, big, line, out):
            p.unlink(missing_ok=True)
        tmp.rmdir()


if __name__ == "__main__":
    main()
