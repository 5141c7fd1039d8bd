"""`compare()`: the public entry point, driving the runner over the precisions."""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from ..errors import DoctorError
from ..inputs import real_inputs
from ..report import Report
from ..sections import CompareResult
from .attribution import keep_candidates, select_modules
from .device import collect, device_name, resolve_device
from .findings import MAX_KEEP_SHARE, variant_findings
from .once import each_message_once
from .precision import DEFAULT_PRECISIONS, Precision, parse_precision
from .progress import OnProgress, Tracker, rich_progress
from .recommend import helps, recommend
from .results import VariantResult
from .runner import Runner


def compare(
    model_factory: Callable[[], Any] | torch.nn.Module,
    inputs: Any,
    precisions: Sequence[str] = DEFAULT_PRECISIONS,
    keep_fp32: Iterable[str] | str | None = "auto",
    train_step: bool = False,
    *,
    device: str | torch.device | None = None,
    warmup: int = 2,
    repeats: int = 10,
    top_k: int = 3,
    tolerance: float = 2e-2,
    attribution: bool = True,
    loss_fn: Callable[[Any], torch.Tensor] | None = None,
    seed: int = 0,
    progress: bool = False,
    on_progress: OnProgress | None = None,
) -> Report:
    """Run the model in each precision on this hardware and recommend one, with its reasons.

    model_factory: a callable returning a fresh fp32 nn.Module (called once per variant), or
        a module (deep-copied per variant).
    inputs: a tensor, a sequence of tensors (positional), a mapping (keyword), `(args, kwargs)`,
        or shape specs such as "2x4x64x64:float32" / TensorSpec in any of those places.
    precisions: "fp32", "fp16", "bf16", "autocast-fp16", "autocast-bf16" (other spellings too).
    keep_fp32: "auto" (measure keeping the `top_k` worst modules of each low precision in fp32),
        module paths / globs / class names to keep in fp32, or None for no such rows.
    train_step: also run loss.backward() and compare gradients (fp16 uses dynamic loss scaling).
    tolerance: the largest relative L2 output error (‖low − fp32‖ / ‖fp32‖) a recommendation accepts.
    on_progress: called with a `ProgressEvent` at each step; `progress=True` draws a rich bar on
        stderr instead. compare itself prints nothing.
    """
    if repeats < 1 or warmup < 0:
        raise DoctorError("repeats must be ≥ 1 and warmup ≥ 0")
    dev = resolve_device(device)
    wanted = [parse_precision(p) for p in precisions]
    if not any(p.is_reference for p in wanted):
        wanted.insert(0, Precision(torch.float32))
    wanted.sort(key=lambda p: not p.is_reference)  # the reference runs first
    if isinstance(model_factory, torch.nn.Module):
        module = model_factory
        model_factory = lambda: copy.deepcopy(module)  # noqa: E731
    args, kwargs = real_inputs(inputs, dev, seed)
    runner = Runner(model_factory, args, kwargs, dev, train_step, loss_fn, warmup, repeats, seed)
    runner.prepare()

    with contextlib.ExitStack() as stack:
        if on_progress is None and progress:
            on_progress = stack.enter_context(rich_progress())
        tracker = Tracker(on_progress, len(wanted) + 1)  # + fp32 timed again at the end
        stack.enter_context(each_message_once())  # a library's warning at each build: once
        results = _run_all(runner, wanted, keep_fp32, top_k, attribution, tracker)

    report = Report(tool="compare")
    settings = {
        "device": str(dev),
        "device_name": device_name(dev),
        "torch": torch.__version__,
        "warmup": warmup,
        "repeats": repeats,
        "tolerance": tolerance,
        "train_step": train_step,
        "batch": runner.batch,
        "seed": seed,
        "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32) if dev.type == "cuda" else None,
    }
    for r in results:
        for f in variant_findings(r, dev, tolerance, top_k, runner.total_params):
            report.add(f)
    report.add(recommend(results, dev, tolerance))
    report.sections.append(CompareResult(settings=settings, variants=[r.to_dict() for r in results]))
    del runner
    return report


def _resolve_keep(keep_fp32: Any, model: torch.nn.Module) -> str | list[str] | None:
    """ "auto", None, or the module paths the user's names, globs and class names select."""
    if keep_fp32 is None or keep_fp32 is False or keep_fp32 == "auto":
        return keep_fp32 or None
    names = [keep_fp32] if isinstance(keep_fp32, str) else list(keep_fp32)
    return select_modules(model, names) if names else None


def _keep_sets(base: VariantResult, keep_fp32: Any, top_k: int, runner: Runner) -> list[list[str]]:
    """The user's set, or ("auto") the sets worth measuring: per module type first when one set
    of the worst modules is not obviously enough."""
    if keep_fp32 != "auto":
        return [list(keep_fp32)] if keep_fp32 else []
    return keep_candidates(base.layers, top_k, max_params=int(runner.total_params * MAX_KEEP_SHARE))


def _run_keep(runner: Runner, base: VariantResult, keep: list[str], tracker: Tracker) -> VariantResult:
    dev = runner.device
    p = Precision(base.precision.dtype, base.precision.autocast, tuple(keep))
    tracker.add()
    tracker.stage(p.name, "running")
    result, model = runner.run_variant(p)
    if result.status == "fails" and not p.autocast:
        # a functional op between modules refused mixed dtypes: cast outputs back instead
        del model
        collect(dev)
        retry, model = runner.run_variant(p, "cast-back")
        if retry.status != "fails":
            result = retry
    del model
    collect(dev)
    tracker.advance()
    return result


def _error_of(r: VariantResult) -> float:
    return r.error.rel_l2 if r.error is not None and r.status == "ok" else math.inf


def _run_all(
    runner: Runner,
    wanted: list[Precision],
    keep_fp32: Any,
    top_k: int,
    attribution: bool,
    tracker: Tracker,
) -> list[VariantResult]:
    """Every asked-for precision, then its keep-in-fp32 row, then fp32 timed again."""
    dev = runner.device
    results: list[VariantResult] = []
    for p in wanted:
        tracker.stage(p.name, "running")
        result, model = runner.run_variant(p)
        if p.is_reference:
            if result.status != "ok" or model is None:
                raise DoctorError(f"the fp32 reference run failed: {result.failure}")
            runner.reference_model = model
            runner.total_params = sum(q.numel() for q in model.parameters())
            keep_fp32 = _resolve_keep(keep_fp32, model)  # a typo fails now, not after every run
        elif result.status in ("ok", "overflows") and attribution and model is not None:
            tracker.stage(p.name, "per-layer error")
            result.layers = runner.attribute(result, model)
        if not p.is_reference:
            del model
        results.append(result)
        collect(dev)
        tracker.advance()
    for base in [r for r in results if not r.precision.is_reference and r.status != "fails"]:
        tried = [
            _run_keep(runner, base, keep, tracker) for keep in _keep_sets(base, keep_fp32, top_k, runner)
        ]
        if not tried:
            continue
        tried.sort(key=_error_of)
        base.keep_search = [
            {
                "keep": list(r.precision.keep),
                "error": r.error.rel_l2 if r.error and r.status == "ok" else None,
                "status": r.status,
                "helps": helps(r, base),
            }
            for r in tried
        ]
        results.append(tried[0])  # the best set measured; the others are listed in the base row

    tracker.stage("fp32", "timing again")
    runner.retime_reference(results[0])
    tracker.advance()
    tracker.stage("fp32", "done")
    return results
