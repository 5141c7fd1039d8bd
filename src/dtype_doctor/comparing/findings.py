"""The findings of one variant: it fails, overflows, drifts, and which layers lose most."""

from __future__ import annotations

import math

import torch

from .. import catalog
from ..catalog.family_codes import (
    PRECISION_ERROR_HIGH,
    PRECISION_FRAGILE_LAYERS,
    PRECISION_OVERFLOW,
    PRECISION_VARIANT_FAILED,
)
from ..dtypes import dtype_name
from ..report import Evidence, Finding, Location, Severity
from .attribution import rank, top_modules
from .precision import Precision
from .results import VariantResult

MAX_KEEP_SHARE = 1 / 3  # "auto" never keeps a module holding more than this share of the parameters


def variant_names(p: Precision, dev: torch.device) -> dict[str, object]:
    return {"variant": p.name, "dtype": f"torch.{str(p.dtype).removeprefix('torch.')}", "device": dev.type}


def context_tags(p: Precision) -> list[str]:
    """Catalog context tags: the dtype, and how it is applied ('autocast' or 'cast')."""
    dtype = dtype_name(p.dtype)
    how = "autocast" if p.autocast else "cast"
    return [dtype, how, f"{how}-{dtype}", *(["keep-fp32"] if p.keep else [])]


def variant_findings(
    r: VariantResult, dev: torch.device, tolerance: float, top_k: int, total_params: int
) -> list[Finding]:
    p = r.precision
    names = variant_names(p, dev)
    out: list[Finding] = []
    if r.status in ("fails", "out-of-memory"):
        cause_codes = [f.code for f in r.findings]
        f = catalog.finding(
            PRECISION_VARIANT_FAILED,
            context=context_tags(p),
            names=names,
            message=f"{p.name} does not run: {r.failure}",
            evidence=[Evidence(r.failure or "", source=p.name)],
            related=cause_codes + list(catalog.family(PRECISION_VARIANT_FAILED).related),
            data={"variant": p.name},
        )
        if r.findings:  # what watch/explain found: its location and its fixes come first
            first = r.findings[0]
            f.location = first.location
            f.operands = first.operands
            f.fixes = first.fixes + f.fixes
            f.cause = (first.cause + " " if first.cause else "") + f.cause
        out.append(f)
        return out
    if r.status == "overflows":
        module, module_type = r.nonfinite_module or (None, None)
        out.append(
            catalog.finding(
                PRECISION_OVERFLOW,
                context=context_tags(p),
                names={**names, "module": module or "an unlocated module"},
                message=f"{p.name}: non-finite outputs"
                + (f", first produced by '{module}' ({module_type})" if module else ""),
                location=Location(module=module, module_type=module_type) if module else None,
                data={"variant": p.name},
            )
        )
    ranked = rank(r.layers)
    keep = top_modules(ranked, top_k, max_params=int(total_params * MAX_KEEP_SHARE))
    measured = ""
    if r.keep_search:  # keep sets were run: recommend the best only when it lowered the error
        best = r.keep_search[0]
        before = fmt_err(r.error.rel_l2) if r.error and r.status == "ok" else "overflows"
        keep = best["keep"] if best["helps"] else []
        measured = (
            f"; measured keeping {', '.join(best['keep'])} in fp32: error {before} → {fmt_err(best['error'])}"
        )
        if not best["helps"]:
            measured += " (no lower: no keep-in-fp32 set is recommended)"
    if r.error and r.status == "ok" and r.error.rel_l2 > tolerance and not p.keep:
        f = catalog.finding(
            PRECISION_ERROR_HIGH,
            context=context_tags(p),
            names={**names, "keep": keep},
            severity=Severity.WARNING,
            message=f"{p.name}: output error {r.error.rel_l2:.2g} (relative L2) > tolerance {tolerance:g}"
            + (f"; worst modules: {', '.join(keep)}" if keep and not measured else "")
            + measured,
            data={"variant": p.name, "keep_search": r.keep_search or None},
        )
        if not keep:
            f.fixes = [fix for fix in f.fixes if "keep_fp32=" not in (fix.snippet or "")]
        out.append(f)
    troubled = r.status == "overflows" or (r.error is not None and r.error.rel_l2 > tolerance)
    if ranked and keep and troubled and not p.keep:
        top = ranked[: max(top_k, 1)]
        out.append(
            catalog.finding(
                PRECISION_FRAGILE_LAYERS,
                context=context_tags(p),
                names={**names, "keep": keep},
                message=f"{p.name}: "
                + ", ".join(
                    f"'{layer.module}' ({layer.module_type}) {fmt_err(layer.score)}" for layer in top
                ),
                location=Location(module=top[0].module, module_type=top[0].module_type),
                data={"variant": p.name, "layers": [layer.to_dict() for layer in top]},
            )
        )
    return out


def fmt_err(x: float | None) -> str:
    if x is None or math.isnan(x):
        return "n/a"
    if math.isinf(x):
        return "inf"
    return f"{x:.1e}" if x else "0"
