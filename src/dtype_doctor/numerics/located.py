"""Findings that name an op inside a module: finite-but-wrong modules, and the op a non-finite
producer's forward went wrong at (from `opscan`); which producers need such a scan."""

from __future__ import annotations

import math
from typing import Any

import torch

from .. import catalog, remedies
from ..catalog.family_codes import FINITE_BUT_WRONG, FP16_OVERFLOW
from ..catalog.shared_remedies import KEEP_MODULE
from ..remedies.places import OP
from ..report import Evidence, Finding, Fix, Location
from . import limit_source, opsource
from .accuracy import Wrong
from .advice import module_op_name
from .analysis import Producer
from .frames import place as frame_place
from .frames import where
from .opscan import OpHit, expression
from .optrace import Traced
from .stats import fmt


def _where(hit: OpHit) -> str:
    return where(hit.file, hit.line, unknown="its forward")


def op_text(hit: OpHit) -> str:
    """One sentence: which op, where, what it reached against the dtype's limit."""
    where = _where(hit)
    if hit.kind == "nonfinite":
        reached = (
            f"in float32 it reaches {fmt(hit.fp32_absmax)}, above {hit.low_dtype}'s limit {fmt(hit.limit)}"
            if hit.fp32_absmax > hit.limit
            else f"in float32 it stays at {fmt(hit.fp32_absmax)} (operands up to {fmt(hit.inputs_absmax)})"
        )
        return f"Inside it, `{hit.expression}` ({where}) went non-finite in {hit.low_dtype}: {reached}."
    return (
        f"Inside it, `{hit.expression}` ({where}) is the first op whose output is off its float32 value "
        f"by {hit.rel_error:.3g} (relative L2; largest value {fmt(hit.fp32_absmax)}): {hit.low_dtype} "
        "lacks the precision there."
    )


def _keep_fixes(
    path: str, after: float | None, before: float, evidence: dict[str, Any] | None = None
) -> list[Fix]:
    known = dict(evidence or {})
    known["path"] = known.pop("in_root", path)  # the module's path in the model the user names
    fix = remedies.make(KEEP_MODULE, before=before, after=after, **known)
    return [fix] if fix else []


def wrong_finding(w: Wrong, threshold: float, evidence: dict[str, Any] | None = None) -> Finding:
    """`evidence`: the user's name for the model and the places of its fixes (`Monitor.evidence`)."""
    where = f"'{w.path or '<root>'}' ({w.module_type})"
    message = (
        f"{where} gives finite {w.dtype} output {w.rel_error:.1%} off its float32 re-run on the same "
        f"inputs (relative L2 error {w.rel_error:.3g}, threshold {threshold:g}) at step {w.step}: "
        "nothing is inf/NaN, the values are wrong."
    )
    return catalog.finding(
        FINITE_BUT_WRONG,
        message=message,
        location=Location(module=w.path or None, module_type=w.module_type, step=w.step),
        fixes=_keep_fixes(w.path, None, w.rel_error, evidence),
        data={
            "phase": "forward",
            "kind": "finite-but-wrong",
            "rel_error": w.rel_error,
            "threshold": threshold,
            "keep_fp32": [w.path] if w.path else [],
            "op": None,
        },
    )


def scanned(finding: Finding, w: Wrong, evidence: dict[str, Any] | None = None) -> None:
    """Fill in the op the scan named and the measured keep-in-float32 error (`evidence`: see
    `wrong_finding`)."""
    if w.hit is not None:
        _locate(finding, w.hit)
    else:
        finding.message += " The op-level scan found no single op past the threshold (the error builds up)."
    if w.path:
        finding.fixes = _keep_fixes(w.path, w.after, w.rel_error, evidence)
        finding.data["error_after_keep"] = w.after


def unscanned(finding: Finding) -> None:
    finding.message += (
        " The op inside it was not located: the module was not called again after the step that "
        "measured it (run one more step, or `dtype-doctor numerics`, which gives it that call)."
    )


def located(finding: Finding, hit: OpHit) -> None:
    """A non-finite producer's finding, told at the op inside it."""
    _locate(finding, hit)


def _locate(finding: Finding, hit: OpHit) -> None:
    finding.message += " " + op_text(hit)
    loc = finding.location
    loc.op, loc.file, loc.line = hit.expression, hit.file, hit.line
    finding.evidence.append(
        Evidence(
            text=f"op {hit.op} at {_where(hit)}: float32 abs-max {fmt(hit.fp32_absmax)}, "
            f"{hit.low_dtype} limit {fmt(hit.limit)}, operands up to {fmt(hit.inputs_absmax)}"
        )
    )
    finding.data["op"] = {
        "op": hit.op,
        "expression": hit.expression,
        "file": hit.file,
        "line": hit.line,
        "kind": hit.kind,
        "fp32_absmax": hit.fp32_absmax,
        "limit": hit.limit,
        "rel_error": hit.rel_error if math.isfinite(hit.rel_error) else None,  # None: non-finite
    }


def traced(finding: Finding, first: Traced) -> None:
    """Locate a module's finding at the op the step's trace found (optrace), until a scan does better."""
    expr = expression(first.op, first.file, first.line)
    loc = finding.location
    if loc is not None:
        loc.op, loc.file, loc.line = expr, first.file, first.line
    finding.data["op"] = {
        "op": first.op,
        "expression": expr,
        "file": first.file,
        "line": first.line,
        "kind": "nonfinite",
    }


def traced_text(finding: Finding, first: Traced) -> None:
    """The sentence for an op the trace found and no scan measured (the module ran once)."""
    dtype = str(first.dtype).replace("torch.", "")
    expr = expression(first.op, first.file, first.line)
    place = where(first.file, first.line)
    finding.message += f" Inside it, `{expr}` ({place}) went inf/NaN in {dtype} from finite operands."
    traced(finding, first)
    if finding.code != FP16_OVERFLOW:
        return
    limit = torch.finfo(first.dtype).max
    ctx, names = opsource.float32_names(first.file, first.line, first.op, len(first.ins), limit)
    try:  # read off the user's statement: never at the cost of the finding
        if not ctx:  # the op ran inside a call on the user's line (a loss module): its arguments upcast
            ctx, names = _called_names(finding, first)
        more, written = limit_source.limit_names(first.file, first.line, first.dtype)
        ctx, names = ctx | more, {**names, **written}
    except Exception:
        pass
    if ctx:  # the op bounded or computed in float32, in the user's statement
        at = frame_place(first.file, first.line)
        names.update(op=expr, at=f"at {place}", dtype_name=dtype, places={OP: at} if at else None)
        ahead = [f for f in catalog.fixes_for(finding.code, ctx, **names) if f.snippet in names.values()]
        finding.fixes = remedies.first(finding.fixes, *ahead)


def _called_names(finding: Finding, first: Traced) -> tuple[set[str], dict[str, Any]]:
    """`op-upcast` and the statement with the module's low-precision inputs upcast where the user
    passes them (`nn.NLLLoss()(log_probs.float(), target)`: the loss reduced in float32)."""
    low = ("float16", "bfloat16")
    roles = [o.role.split() for o in finding.operands if o.dtype in low]
    positions = sorted({int(r[1]) for r in roles if len(r) == 2 and r[0] == "input" and r[1].isdigit()})
    loc = finding.location
    hints = (loc.module_type or "", (loc.module or "").rpartition(".")[2]) if loc is not None else ()
    found = opsource.called_upcast(first.file, first.line, positions, hints)
    if found is None:
        return set(), {}
    listed = ", ".join(f"`{o}`" for o in found[1])
    operands = f"its operands {listed}" if len(found[1]) > 1 else f"its operand {listed}"
    return {"op-upcast"}, {"upcast": found[0], "operands": operands}


def wants_op_scan(p: Producer) -> bool:
    """A forward producer whose op is not named by its module type: a custom forward, or ops between children."""
    if p.phase != "forward" or p.path is None or p.kind not in ("module", "inline"):
        return False
    return p.kind == "inline" or not p.leaf or module_op_name(None, p.module_type, True).endswith(".forward")
