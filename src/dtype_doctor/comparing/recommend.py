"""The recommendation: the fastest variant within the tolerance that beats fp32 beyond noise."""

from __future__ import annotations

import math

import torch

from .. import catalog
from ..catalog.family_codes import PRECISION_RECOMMENDATION
from ..report import Finding
from .device import device_name
from .findings import context_tags, fmt_err, variant_names
from .precision import Precision
from .results import VariantResult

_MIN_SAMPLES = 3  # fewer timed runs than this: no speed claim either way


def helps(keep: VariantResult, base: VariantResult) -> bool:
    """Keeping the set lowers the error: at least halves it, or makes an overflowing run finite."""
    if keep.status != "ok" or keep.error is None:
        return False
    if base.status == "overflows" or base.error is None:
        return True
    return keep.error.rel_l2 <= 0.5 * base.error.rel_l2


def _faster(a: VariantResult, b: VariantResult) -> bool:
    """a is faster than b beyond noise: a's upper quartile below b's lower quartile (n ≥ 3 each)."""
    if not (a.timing and b.timing) or min(len(a.timing.samples), len(b.timing.samples)) < _MIN_SAMPLES:
        return False
    if a.timing.unstable or b.timing.unstable:
        return False  # never a speed claim from numbers that jump between runs
    return a.timing.iqr[1] < b.timing.iqr[0]


def _unstable(r: VariantResult, ref: VariantResult) -> str | None:
    """Why r's speed cannot be compared with fp32's, naming whose timings are unstable."""
    for who, v in ((r.name, r), ("fp32", ref)):
        why = v.timing.unstable if v.timing else None
        if why:
            return f"{who} timings unstable: {why}"
    return None


def _accepted(r: VariantResult, tolerance: float) -> bool:
    if r.status != "ok" or r.error is None:
        return False
    if r.error.rel_l2 > tolerance:
        return False
    grad = r.grad_error.get("rel_l2") if r.grad_error else None
    return grad is None or grad <= tolerance * 5  # gradients are noisier than outputs


def _reason(r: VariantResult, ref: VariantResult, base: VariantResult | None = None) -> str:
    """One line per variant; a keep row also says what keeping its modules in fp32 bought back."""
    label = r.name
    if r.precision.keep:
        label += f" (keeping {', '.join(repr(m) for m in r.precision.keep)} in fp32)"
    if r.status in ("fails", "out-of-memory"):
        why = f" ({r.findings[0].code})" if r.findings else ""
        return f"{label}: does not run: {r.failure}{why}"
    if r.status == "overflows":
        where = f" in '{r.nonfinite_module[0]}' ({r.nonfinite_module[1]})" if r.nonfinite_module else ""
        return f"{label}: {'still ' if r.precision.keep else ''}overflows{where}"
    ratio = ref.median / r.median if r.median > 0 else math.nan
    if r.precision.is_reference:
        speed = f"{r.median * 1e3:.3g} ms"
        if r.timing and r.timing.unstable:
            speed += f" (unstable: {r.timing.unstable})"
    elif unstable := _unstable(r, ref):
        speed = f"no speed claim ({unstable})"
    elif _faster(r, ref):
        speed = f"{ratio:.2f}× faster than fp32"
    elif _faster(ref, r):
        speed = f"{1 / ratio:.2f}× slower than fp32"
    elif r.timing and len(r.timing.samples) < _MIN_SAMPLES:
        speed = f"{ratio:.2f}× fp32's speed (too few runs to tell from noise)"
    else:
        speed = f"as fast as fp32 within noise ({ratio:.2f}×)"
    spread = r.timing.spread if r.timing else math.nan
    text = f"{label}: {speed} (median of {len(r.timing.samples) if r.timing else 0}, IQR {spread:.0%})"
    if not r.precision.is_reference and r.error:
        text += f", error {fmt_err(r.error.rel_l2)}"
        if base is not None and base.error is not None:
            text += f" (without keeping: {'overflows' if base.status == 'overflows' else fmt_err(base.error.rel_l2)})"
            if not helps(r, base):
                text += ": keeping them does not lower the error, not recommended"
            others = [t for t in base.keep_search[1:] if t["keep"]]
            if others:
                text += "; also measured: " + ", ".join(
                    f"keeping {', '.join(t['keep'])}: {fmt_err(t['error']) if t['error'] is not None else t['status']}"
                    for t in others
                )
        if r.grad_error.get("rel_l2") is not None:
            text += f", gradient error {fmt_err(r.grad_error['rel_l2'])}"
    if r.peak_bytes is not None and ref.peak_bytes:
        text += f", peak memory {r.peak_bytes / max(ref.peak_bytes, 1):.2f}× fp32"
    return text


def _base_of(r: VariantResult, results: list[VariantResult]) -> VariantResult | None:
    """The plain variant a keep-in-fp32 row was derived from."""
    if not r.precision.keep:
        return None
    p = r.precision
    return next((b for b in results if b.precision == Precision(p.dtype, p.autocast)), None)


def _snippet(p: Precision, dev: torch.device) -> str:
    dtype = f"torch.{str(p.dtype).removeprefix('torch.')}"
    if p.is_reference:
        return "model = model.float()   # keep fp32"
    if p.keep:
        keep = (
            f"from dtype_doctor import to_precision\n# {', '.join(p.keep)} stay fp32, cast at their borders\n"
        )
        if p.autocast:
            return (
                f"{keep}model = to_precision(model, {dtype}, keep_fp32={list(p.keep)!r}, autocast=True)\n"
                f'with torch.autocast("{dev.type}", dtype={dtype}):\n    out = model(x)'
            )
        return (
            f"{keep}model = to_precision(model, {dtype}, keep_fp32={list(p.keep)!r})\n"
            f"out = model(x.to({dtype}))"
        )
    if p.autocast:
        return f'with torch.autocast("{dev.type}", dtype={dtype}):\n    out = model(x)'
    return f"model = model.to({dtype})\nout = model(x.to({dtype}))"


def recommend(results: list[VariantResult], dev: torch.device, tolerance: float) -> Finding:
    """The fastest variant within the tolerance, beating fp32 beyond noise; fp32 otherwise."""
    ref = next(r for r in results if r.precision.is_reference)
    accepted = [
        r
        for r in results
        if _accepted(r, tolerance)
        and not r.precision.is_reference
        and (not r.precision.keep or (base := _base_of(r, results)) is None or helps(r, base))
    ]
    faster = sorted((r for r in accepted if _faster(r, ref)), key=lambda r: r.median)
    best = faster[0] if faster else ref
    reasons = [_reason(r, ref, _base_of(r, results)) for r in results]
    if best is ref:
        if accepted and ref.timing and ref.timing.unstable:
            headline = (
                f"fp32: timings on this machine were unstable ({ref.timing.unstable}), so no speed "
                "claim is made; run again on an idle machine or with more --repeats"
            )
        elif accepted:
            headline = "fp32: no low-precision variant is faster beyond noise on this hardware" + (
                f" ({device_name(dev)})" if dev.type == "cpu" else ""
            )
        if accepted:
            lighter = min(accepted, key=lambda r: r.weights_bytes or math.inf)
            if lighter.weights_bytes and ref.weights_bytes and lighter.weights_bytes < ref.weights_bytes:
                headline += f"; if memory matters, {lighter.name} halves the weights at error {fmt_err(lighter.error.rel_l2 if lighter.error else None)}"
        else:
            headline = f"fp32: no low-precision variant runs within the tolerance {tolerance:g}"
    else:
        headline = f"{best.name}: {ref.median / best.median:.2f}× faster than fp32, error {fmt_err(best.error.rel_l2 if best.error else None)}"
    p = best.precision
    f = catalog.finding(
        PRECISION_RECOMMENDATION,
        context=context_tags(p),
        names={
            **variant_names(p, dev),
            "snippet": _snippet(p, dev),
            "dtype": f"torch.{str(p.dtype).removeprefix('torch.')}",
        },
        message=headline + "".join(f"\n  · {text}" for text in reasons),
        data={"choice": best.name, "reasons": reasons},
    )
    return f
