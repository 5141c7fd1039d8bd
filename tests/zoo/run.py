"""Run the zoo: `python -m zoo.run [--out results.jsonl] [NAME ...]` from tests/ (or `make zoo`).

Per model and dtype (float16, bfloat16): check with realistic inputs (must be clean and complete when a
real CPU forward of the model loaded the same way runs), then with one input planted in float32 (check's
first error must be in the module where the real run fails). Prints the summary that docs/check.md quotes.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch

import dtype_doctor as dd
from dtype_doctor.checking.check import module_in_traceback

from . import models

DTYPES = (torch.float16, torch.bfloat16)
_DTYPE_ERROR = re.compile(r"dtype|scalar ?type|Half|BFloat16|same type|mixed dtype|ScalarType", re.IGNORECASE)


def _line(exc: BaseException) -> str:
    """The first non-empty line of an exception's message."""
    return next((line.strip() for line in str(exc).splitlines() if line.strip()), "")


def real_run(model: torch.nn.Module, kwargs: dict) -> tuple[str | None, str | None]:
    """(None, None) when the real forward runs; else (message, innermost module of the model that raised)."""
    try:
        with torch.no_grad():
            model(**kwargs)
    except Exception as exc:
        text = f"{type(exc).__name__}: {_line(exc)}"
        return text[:300], module_in_traceback(exc.__traceback__, model)
    return None, None


def _first(report: Any) -> dict | None:
    err = next((f for f in report.findings if f.severity == dd.Severity.ERROR), None)
    if err is None:
        return None
    return {
        "code": err.code,
        "module": err.location.module if err.location else None,
        "message": err.message[:200],
    }


def run_one(name: str, dtype: torch.dtype, folder: Path) -> dict:
    out: dict[str, Any] = {"name": name, "dtype": str(dtype).removeprefix("torch.")}
    try:
        model = models.build(name)
        clean = models.inputs(model, dtype)
    except Exception as exc:
        out["skip"] = f"{type(exc).__name__}: {_line(exc)}"[:300]
        return out
    real = models.load(model, dtype, folder)
    out["real"], out["real_module"] = real_run(real, clean)
    report = dd.check(model, dtype=dtype, **models.inputs(model, dtype))
    out["check"] = _first(report)
    out["incomplete"] = next((f.message[:300] for f in report.findings if f.code == "check-incomplete"), None)
    out["assumptions"] = len(report.meta.get("assumptions", []))
    out["loaded_as"] = report.meta.get("loaded_as")
    plant = models.planted(model, dtype)
    if plant is not None:
        out["planted_real"], out["planted_real_module"] = real_run(real, plant)
        report = dd.check(model, dtype=dtype, **plant)
        out["planted_check"] = _first(report)
        out["planted_incomplete"] = any(f.code == "check-incomplete" for f in report.findings)
    return out


def verdict(r: dict) -> dict[str, bool | None]:
    """complete / false_positive / planted_found for one result (None: not applicable)."""
    if "skip" in r:
        return {}
    runs = r["real"] is None
    v: dict[str, bool | None] = {
        "complete": r["incomplete"] is None,
        "false_positive": r["check"] is not None and runs,
        "real_fails_clean": not runs,
    }
    if not runs and _DTYPE_ERROR.search(r["real"]):  # a real load that fails on dtypes: check names it
        v["real_failure_found"] = (r["check"] or {}).get("module") == r["real_module"]
    if "planted_real" in r and runs:
        found = r.get("planted_check") or {}
        if r["planted_real"] is not None and not _DTYPE_ERROR.search(r["planted_real"]):
            v["planted_invalid"] = True  # the real run fails first for another reason (an index, a shape)
        elif r["planted_real"] is not None:
            v["planted_found"] = found.get("module") == r["planted_real_module"]
        else:  # the model casts its input itself (ViT): the real run is clean, so must check be
            v["planted_false_positive"] = bool(found)
    return v


def summary(results: list[dict]) -> str:
    ran = [r for r in results if "skip" not in r]
    verdicts = [verdict(r) for r in ran]
    fp = [r for r, v in zip(ran, verdicts, strict=False) if v["false_positive"]]
    complete = sum(bool(v["complete"]) for v in verdicts)
    ok = [(r, v) for r, v in zip(ran, verdicts, strict=True) if not v["real_fails_clean"]]
    complete_ok = sum(bool(v["complete"]) for _, v in ok)
    incomplete_ok = [(r["name"], r["dtype"]) for r, v in ok if not v["complete"]]
    invalid = sum(bool(v.get("planted_invalid")) for v in verdicts)
    planted = [v["planted_found"] for v in verdicts if v.get("planted_found") is not None]
    planted_fp = [r for r, v in zip(ran, verdicts, strict=False) if v.get("planted_false_positive")]
    real_found = [v["real_failure_found"] for v in verdicts if "real_failure_found" in v]
    missed = [
        (r["name"], r["dtype"])
        for r, v in zip(ran, verdicts, strict=False)
        if v.get("planted_found") is False
    ]
    lines = [
        f"entries: {len({r['name'] for r in results})}, built and run: {len({r['name'] for r in ran})} "
        f"({len(ran)} runs), skipped: {len({r['name'] for r in results if 'skip' in r})}",
        f"check complete with realistic inputs, where the real load+run is clean: {complete_ok}/{len(ok)} "
        f"(all runs: {complete}/{len(ran)}) incomplete: {incomplete_ok[:20]}",
        f"false positives (check error, real run clean): {len(fp)} {[(r['name'], r['dtype']) for r in fp][:20]}",
        f"real load+run fails with clean inputs: {len(ran) - len(ok)}; on a dtype error: {len(real_found)}, "
        f"check's first error at the real failing module: {sum(real_found)}/{len(real_found)}",
        f"planted fp32 input found at the real run's first failing module: {sum(planted)}/{len(planted)} "
        f"missed: {missed[:20]}; not applicable (the real run fails first for another reason): {invalid}",
        f"planted input the model casts itself (real run clean), check not clean: {len(planted_fp)} "
        f"{[(r['name'], r['dtype']) for r in planted_fp][:20]}",
    ]
    return "\n".join(lines)


class _Timeout(Exception):
    pass


def _alarm(*_: Any) -> None:
    raise _Timeout("over 120 s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("names", nargs="*")
    parser.add_argument("--out", default="zoo-results.jsonl")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    names = args.names or models.entries()
    results = []
    signal.signal(signal.SIGALRM, _alarm)
    with open(args.out, "w") as sink:
        for name in names:
            for dtype in DTYPES:
                with tempfile.TemporaryDirectory() as tmp:
                    signal.alarm(120)
                    try:
                        r = run_one(name, dtype, Path(tmp))
                    except BaseException as exc:
                        if isinstance(exc, KeyboardInterrupt):
                            raise
                        r = {
                            "name": name,
                            "dtype": str(dtype),
                            "skip": f"harness: {type(exc).__name__}: {exc}"[:300],
                        }
                    finally:
                        signal.alarm(0)
                results.append(r)
                sink.write(json.dumps(r) + "\n")
                sink.flush()
    print(summary(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
