"""Strict watch and check under CPU autocast on the zoo: `python -m zoo.autocast [--out F] [NAME ...]` from tests/.

Per model and autocast dtype (bfloat16, float16): the float32 model runs under
`torch.autocast("cpu", dtype)`, with float32 inputs and with its floating inputs in the autocast dtype (one
operand float32, one low: what autocast is for). A false positive is `watch(mode="strict")` stopping a
run the real forward finishes, or `check(..., autocast=torch.autocast("cpu", dtype=dtype))` reporting an
error for it (`--check-device cuda`: check's default, CUDA's policy, which a CPU run does not decide).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import signal
import sys
import warnings
from typing import Any

import torch

import dtype_doctor as dd

from . import models
from .run import _alarm, _line

DTYPES = (torch.bfloat16, torch.float16)


def _low_inputs(kwargs: dict, dtype: torch.dtype) -> dict:
    return {
        k: v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v
        for k, v in kwargs.items()
    }


def _forward(model: torch.nn.Module, kwargs: dict, dtype: torch.dtype, strict: bool) -> str | None:
    """None when the forward runs under CPU autocast (watched strict when asked); else the error."""
    session = dd.watch(model, mode="strict") if strict else contextlib.nullcontext()
    try:
        with torch.no_grad(), session, torch.autocast("cpu", dtype=dtype):
            model(**kwargs)
    except Exception as exc:
        return f"{type(exc).__name__}: {_line(exc)}"[:300]
    return None


def run_one(name: str, dtype: torch.dtype, check_device: str = "cpu") -> list[dict]:
    try:
        model = models.build(name)
        clean = models.inputs(model, torch.float32)
    except Exception as exc:
        return [{"name": name, "skip": f"{type(exc).__name__}: {_line(exc)}"[:300]}]
    out = []
    for kind, kwargs in (("fp32 inputs", clean), ("low inputs", _low_inputs(clean, dtype))):
        r: dict[str, Any] = {"name": name, "dtype": str(dtype).removeprefix("torch."), "inputs": kind}
        r["real"] = _forward(model, kwargs, dtype, strict=False)
        r["strict"] = _forward(model, kwargs, dtype, strict=True)
        autocast = torch.autocast("cpu", dtype=dtype) if check_device == "cpu" else dtype  # cuda: the default
        report = dd.check(model, dtype=torch.float32, autocast=autocast, **kwargs)
        err = next((f for f in report.findings if f.severity == dd.Severity.ERROR), None)
        r["check"] = f"{err.code}: {err.message[:160]}" if err is not None else None
        out.append(r)
    return out


def summary(results: list[dict]) -> str:
    ran = [r for r in results if "skip" not in r]
    clean = [r for r in ran if r["real"] is None]
    strict_fp = [r for r in clean if r["strict"] is not None]
    check_fp = [r for r in clean if r["check"] is not None and not r["check"].startswith("check-incomplete")]
    incomplete = [r for r in clean if r["check"] is not None and r["check"].startswith("check-incomplete")]
    caught = [r for r in ran if r["real"] is not None and r["strict"] is not None]

    def names(rs: list[dict]) -> list:
        return [(r["name"], r["dtype"], r["inputs"]) for r in rs][:20]

    return "\n".join(
        [
            f"models: {len({r['name'] for r in results})}, runs: {len(ran)}, real autocast runs clean: {len(clean)}",
            f"strict false positives (strict stops, real runs): {len(strict_fp)} {names(strict_fp)}",
            f"check false positives (check error, real CPU run clean): "
            f"{len(check_fp)} {names(check_fp)}; check incomplete: {len(incomplete)} {names(incomplete)}",
            f"real run fails, strict stops it too: {len(caught)}/{len(ran) - len(clean)}",
        ]
    )


def _guarded(name: str, dtype: torch.dtype, check_device: str) -> list[dict]:
    signal.alarm(120)
    try:
        return run_one(name, dtype, check_device)
    except Exception as exc:
        return [{"name": name, "skip": f"harness: {type(exc).__name__}: {exc}"[:300]}]
    finally:
        signal.alarm(0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("names", nargs="*")
    parser.add_argument("--out", default="zoo-autocast.jsonl")
    parser.add_argument("--check-device", default="cpu", choices=["cpu", "cuda"], help="check's policy")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    signal.signal(signal.SIGALRM, _alarm)
    results: list[dict] = []
    with open(args.out, "w") as sink:
        for name, dtype in itertools.product(args.names or models.entries(), DTYPES):
            found = _guarded(name, dtype, args.check_device)
            results += found
            sink.writelines(json.dumps(r) + "\n" for r in found)
    print(summary(results))
    return 0 if not any(r.get("strict") for r in results if r.get("real") is None) else 1


if __name__ == "__main__":
    sys.exit(main())
