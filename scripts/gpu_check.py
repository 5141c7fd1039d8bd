"""`make gpu-check`: on a machine with one CUDA GPU, in at most 6.5 minutes, run tests/gpu, the CUDA
benchmarks (watch, numerics, check) and the CUDA autocast table generator, and write one summary:
out/gpu-check/summary.json and summary.md (format: docs/benchmarks.md, "make gpu-check").

    PYTHONPATH=src python scripts/gpu_check.py [--out out/gpu-check] [--budget 300]

Each step runs in its own process under its share of the budget; a step that fails or runs out of
time is recorded as such and the next one runs. Without a CUDA device: a message, exit 2, nothing run.
Exit status: 0 when every step passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
TAIL = 4000  # characters of each step's output kept in the summary


def steps(out: Path) -> list[tuple[str, list[str], float]]:
    """(name, command, seconds it may take at most)."""
    return [
        ("tests/gpu", [PY, "-m", "pytest", "-q", "tests/gpu", f"--junitxml={out / 'tests-gpu.xml'}"], 170),
        ("bench watch", [PY, "benchmarks/bench_watch_overhead.py", "--device", "cuda", "--reps", "7"], 45),
        (
            "bench numerics",
            [
                PY,
                "benchmarks/bench_numerics_overhead.py",
                "--device",
                "cuda",
                "--dtype",
                "float16",
                "--reps",
                "3",
            ],
            45,
        ),
        ("bench check", [PY, "benchmarks/bench_check_llama7b.py", "--repeat", "1"], 30),
        (
            "autocast table cuda",
            [
                PY,
                "scripts/gen_autocast_table.py",
                "--device",
                "cuda",
                "--budget",
                "60",
                "--out",
                str(out / "autocast_ops.json"),
            ],
            70,
        ),
    ]


def run_step(name: str, command: list[str], limit: float, out: Path) -> dict[str, Any]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])),
        "DTYPE_DOCTOR_GPU_OUT": str(out),  # where tests/gpu leave what they read (apex's report...)
    }
    start = time.monotonic()
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=limit)
        status = "passed" if done.returncode == 0 else "failed"
        code, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        status, code = "timed out", None
        output = "".join(x.decode() if isinstance(x, bytes) else (x or "") for x in (exc.stdout, exc.stderr))
    seconds = round(time.monotonic() - start, 1)
    return {"name": name, "command": " ".join(command[1:]), "status": status, "returncode": code,
            "seconds": seconds, "limit_s": limit, "output_tail": output[-TAIL:]}  # fmt: skip


def pytest_counts(xml: Path) -> dict[str, int] | None:
    if not xml.exists():
        return None
    head = re.search(r"<testsuite\b[^>]*>", xml.read_text())
    if head is None:
        return None
    got = dict(re.findall(r'(\w+)="(\d+)"', head.group(0)))
    return {k: int(got.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}


def markdown(summary: dict[str, Any]) -> str:
    env = summary["environment"]
    lines = [
        f"# make gpu-check: {summary['verdict']}",
        "",
        f"{env['gpu']}, Python {env['python']}, torch {env['torch']} (CUDA {env['cuda']}), "
        f"commit {env['commit']}, {summary['seconds']} s of {summary['budget_s']} s",
        "",
        "| step | status | seconds |",
        "|---|---|---:|",
        *(f"| {s['name']} | {s['status']} | {s['seconds']} |" for s in summary["steps"]),
    ]
    for s in summary["steps"]:
        lines += [
            "",
            f"## {s['name']}",
            "",
            f"`{s['command']}`",
            "",
            "```",
            s["output_tail"].strip()[-1500:],
            "```",
        ]
    return "\n".join(lines) + "\n"


def environment() -> dict[str, Any]:
    import torch

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return {
        "gpu": torch.cuda.get_device_name(0),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "commit": commit.stdout.strip() or None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "gpu-check")
    parser.add_argument("--budget", type=float, default=380.0, help="seconds for every step together")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print(
            "gpu-check: no CUDA device here (torch.cuda.is_available() is False); nothing run",
            file=sys.stderr,
        )
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + args.budget
    started = time.monotonic()
    results = []
    for name, command, limit in steps(args.out):
        left = deadline - time.monotonic()
        if left < 5:
            results.append({"name": name, "command": " ".join(command[1:]), "status": "not run (budget spent)",
                            "returncode": None, "seconds": 0.0, "limit_s": limit, "output_tail": ""})  # fmt: skip
            continue
        results.append(run_step(name, command, min(limit, left), args.out))
        print(f"gpu-check: {name}: {results[-1]['status']} in {results[-1]['seconds']} s", file=sys.stderr)
    results[0]["pytest"] = pytest_counts(args.out / "tests-gpu.xml")
    ok = all(s["status"] == "passed" for s in results)
    summary = {
        "verdict": "passed" if ok else "failed",
        "seconds": round(time.monotonic() - started, 1),
        "budget_s": args.budget,
        "environment": environment(),
        "steps": results,
    }
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    (args.out / "summary.md").write_text(markdown(summary))
    print(f"gpu-check: {summary['verdict']}; {args.out / 'summary.md'}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
