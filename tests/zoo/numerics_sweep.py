"""Numerics on correct code, over the zoo: `python -m zoo.numerics_sweep [--out F.jsonl] [NAME ...]`
from tests/ (issue 40, item 5).

Per model that builds from a tiny config and runs its real forward: a bfloat16 inference under
`watch(numerics=True)` (what `run --numerics` keeps on), and two steps of float32 training under
bfloat16 autocast with a plain SGD step. A correct program gets no warning or error; every one found
is listed with its code, module and message. Prints one line per model and a summary.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
import warnings
from typing import Any

import torch

import dtype_doctor as dd

from . import models

LOUD = ("error", "warning")


def _loud(report: Any) -> list[dict]:
    return [
        {"code": f.code, "module": f.location.module if f.location else None, "message": f.message[:240]}
        for f in report.findings
        if f.severity.value in LOUD
    ]


def _mean_of(out: Any) -> torch.Tensor | None:
    from dtype_doctor.tensors import iter_tensors

    floats = [t for t in iter_tensors(out) if t.is_floating_point() and t.requires_grad]
    return sum(t.float().mean() for t in floats) if floats else None


def sweep_one(name: str) -> dict:
    out: dict[str, Any] = {"name": name}
    try:
        model = models.build(name)
        low = models.inputs(model, torch.bfloat16)
        model.to(torch.bfloat16)
        with torch.no_grad():
            model(**low)  # the plain run must work for the program to be correct
    except Exception as exc:
        out["skip"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200]
        return out
    with dd.watch(numerics=True) as session, torch.no_grad():
        model(**low)
    out["inference"] = _loud(session.report)
    model.float().train()
    wide = models.inputs(model, torch.float32)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    try:
        with dd.watch(numerics=True) as session:
            for _ in range(2):
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    loss = _mean_of(model(**wide))
                if loss is None:
                    break
                loss.backward()
                opt.step()
                opt.zero_grad()
        out["training"] = _loud(session.report)
    except Exception as exc:
        out["training_skip"] = f"{type(exc).__name__}: {str(exc)[:160]}"
    return out


def _alarm(*_: Any) -> None:
    raise TimeoutError("took over 60 s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*")
    parser.add_argument("--out", default=None)
    a = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    names = a.names or models.entries()
    results, started = [], time.perf_counter()
    signal.signal(signal.SIGALRM, _alarm)
    for name in names:
        signal.alarm(60)
        try:
            r = sweep_one(name)
        except Exception as exc:
            r = {"name": name, "skip": f"{type(exc).__name__}: {exc}"[:200]}
        finally:
            signal.alarm(0)
        results.append(r)
        loud = r.get("inference", []) + r.get("training", [])
        state = "skip" if "skip" in r else ("LOUD " + json.dumps(loud) if loud else "clean")
        print(f"{name}: {state}", flush=True)
    ran = [r for r in results if "skip" not in r]
    loud = [r for r in ran if r.get("inference") or r.get("training")]
    print(
        f"\n{len(ran)} models ran ({len(results) - len(ran)} skipped), "
        f"{sum(1 for r in ran if 'training' in r)} trained; with a warning or error: {len(loud)} "
        f"({time.perf_counter() - started:.0f} s)"
    )
    if a.out:
        with open(a.out, "w") as f:
            for r in results:
                f.write(json.dumps(r) + "\n")
    return 1 if loud else 0


if __name__ == "__main__":
    sys.exit(main())
