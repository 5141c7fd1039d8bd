"""Error text, traceback or whole log → findings, through the catalog. Never imports torch.

Any size of input, in bounded memory: `scan` reads it block by block and folds the matched lines
into hits; here the hits become findings (the evidence stage: frames, words around, set-up, and
the facts of this machine when the text leaves a tie). Text with no message goes to `fallback`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .. import catalog
from ..catalog.context import ENV_REFINEMENTS, REFINEMENTS
from ..catalog.family_codes import (
    ATTENTION_DTYPE_MISMATCH,
    CONV_BIAS_DTYPE_MISMATCH,
    CONV_WEIGHT_DTYPE_MISMATCH,
    DEVICE_MISMATCH,
    INDEX_PUT_DTYPE_MISMATCH,
    MATMUL_DTYPE_MISMATCH,
    NORM_DTYPE_MISMATCH,
    SCALAR_TYPE_MISMATCH,
)
from ..dtypes import canonical, is_low_precision, torch_name
from ..report import Evidence, Finding, Location, Operand, Report, Severity
from .environment import Environment
from .match import devices
from .scan import Hit, Scanner, joined
from .stream import Sample, Source
from .tracebacks import Frame, call_hint, culprit_frame, op_of

__all__ = ["explain", "explain_sources"]

_MISMATCH_CODES = frozenset(
    {
        SCALAR_TYPE_MISMATCH,
        MATMUL_DTYPE_MISMATCH,
        NORM_DTYPE_MISMATCH,
        CONV_WEIGHT_DTYPE_MISMATCH,
        CONV_BIAS_DTYPE_MISMATCH,
        ATTENTION_DTYPE_MISMATCH,
        INDEX_PUT_DTYPE_MISMATCH,
    }
)
_LEGACY = re.compile(r"Tensor\b|Type\b|\bbackend\b|device type")  # texts that name the devices
_PARAM_ROLES = ("weight", "bias", "m2", "right", "batch2", "destination", "parameters (required)", "expected")
_SEVERITY_ORDER = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


def explain(text: str | bytes, source: str | None = None, env: Environment | None = None) -> Report:
    """Diagnose an error message, a traceback or a whole log.

    >>> explain("mat1 and mat2 must have the same dtype, but got Float and Half").codes()
    ['matmul-dtype-mismatch']
    """
    return explain_sources([(source, text)], env=env)


def explain_sources(sources: Iterable[tuple[str | None, Source]], env: Environment | None = None) -> Report:
    """Like `explain`, over several inputs (e.g. one log per rank); duplicates fold across them.

    An input is a str, bytes or a binary file object (read in 1 MB chunks: memory stays bounded
    whatever its size). `env`: facts about the machine explain runs on (`environment.read()`), which
    break ties between families the text leaves open; None reads nothing.
    """
    hits: dict[tuple, list[Hit]] = {}
    samples: list[Sample] = []
    names: list[str] = []
    for source, raw in sources:
        if not isinstance(raw, (str, bytes, bytearray)) and not hasattr(raw, "read"):
            raise TypeError(f"explain expects str or bytes (or a binary file), got {type(raw).__name__}")
        sample = Sample(source)
        Scanner(source, hits, sample).run(raw)
        samples.append(sample)
        if source:
            names.append(source)
    if not hits:
        for sample in samples:
            whole = sample.whole()
            if whole is not None:  # a short paste wrapped anywhere, even inside a trigger
                Scanner(sample.source, hits, None).scan(joined(whole), 0, None, 1)
    report = Report(tool="explain", meta={"sources": names} if names else {})
    found = [hit for group in hits.values() for hit in group]
    if found:
        findings = _findings(found, env)
    else:
        from .fallback import fallback  # only text without a known message pays for its import

        findings = [fallback(samples)]
    described = env.describe() if env is not None else None
    if described is not None:
        report.meta["environment"] = described
    findings.sort(key=lambda f: (_SEVERITY_ORDER[f.severity], -f.confidence, _first_line(f)))
    report.findings = findings
    return report


# ---- findings ------------------------------------------------------------------------------------


def _operands(hit: Hit, roles: dict[str, str]) -> list[Operand]:
    pat = hit.pattern
    base_roles = dict(pat.roles)
    for tag, alt in pat.roles_if:
        if tag in hit.tags and "op-linear" not in hit.tags:
            base_roles.update(alt)
    operands = []
    for group, value in hit.match.groupdict().items():
        if value is None or group in pat.info or (hit.code == DEVICE_MISMATCH and not canonical(value)):
            continue  # a device name (`cuda`) is not an operand dtype
        role = base_roles.get(group, group)
        role = roles.get(group, roles.get(role, role))
        operands.append(Operand(role=role, dtype=canonical(value) or value, name=None))
    return operands


def _refine(
    code: str, tags: set[str], rules: tuple = REFINEMENTS
) -> tuple[str, dict[str, str], str, frozenset[str]]:
    """The family the context makes of a message's family, and the tags that decided it."""
    for ref in rules:
        if code in ref.codes and ref.when <= tags and not (ref.unless & tags):
            return ref.to, dict(ref.roles), ref.note, ref.when
    return code, {}, "", frozenset()


def _env_may_decide(code: str, tags: set[str]) -> bool:
    """Could a fact about this machine decide this finding (the text gives the rest of a rule)?"""
    return any(
        code in r.codes and {t for t in r.when if not t.startswith("env-")} <= tags for r in ENV_REFINEMENTS
    )


def _findings(hits: list[Hit], env: Environment | None) -> list[Finding]:
    prepared = []
    env_tags: dict[str, str] | None = None
    for hit in hits:
        hit.why = {**hit.log_tags, **hit.why}
        for tag in hit.pattern.tags:
            hit.why.setdefault(tag, hit.match.group(0)[:80])
        hit.tags = set(hit.why)
        for op in (canonical(v) for k, v in hit.match.groupdict().items() if v and k not in hit.pattern.info):
            if op:
                hit.tags.add(f"dtype-{op}")
                if op.startswith("float8"):
                    hit.tags.add("dtype-float8")
        code, roles, note, decided = _refine(hit.code, hit.tags)
        if code == hit.code and env is not None and _env_may_decide(code, hit.tags):
            env_tags = env.tags() if env_tags is None else env_tags  # read only when it can decide
            # the text left it open: the machine explain runs on may decide
            code, roles, note, decided = _refine(hit.code, hit.tags | set(env_tags), ENV_REFINEMENTS)
            hit.env = {t: env_tags[t] for t in decided if t in env_tags}
        hit.why = {t: hit.why.get(t, hit.env.get(t, t)) for t in sorted(decided)}
        operands = _operands(hit, roles)
        prepared.append((hit, code, operands, note))
    distinct = {
        (c, tuple((o.role, o.dtype) for o in ops)) for _, c, ops, _ in prepared if c in _MISMATCH_CODES
    }
    multi = len(distinct) >= 2
    return [_finding(hit, code, operands, note, multi) for hit, code, operands, note in prepared]


def _finding(hit: Hit, code: str, operands: list[Operand], note: str, multi: bool) -> Finding:
    tags = set(hit.tags)
    if "training" in tags or multi:
        tags.discard("inference")  # sampling inside a training run: training's fixes apply
    if multi and code in _MISMATCH_CODES:
        tags.add("multi-error")
    input_dtype = next(
        (o.dtype for o in operands if o.role in ("input", "m1", "left", "query", "source")), None
    )
    if input_dtype == "float32":
        tags.add("input-fp32")
    elif is_low_precision(input_dtype):
        tags.add("input-low")
    if any(o.dtype == "float64" for o in operands):
        tags.add("fp64")
    model_dtype = next((o.dtype for o in operands if o.role in _PARAM_ROLES and canonical(o.dtype)), None)
    if model_dtype is None or model_dtype == input_dtype:
        model_dtype = next((o.dtype for o in operands if is_low_precision(o.dtype)), model_dtype)
    module_expr, arg = call_hint(hit.frames)
    frame = culprit_frame(hit.frames)
    names = {
        "module": module_expr,
        "tensor": arg,
        "dtype": torch_name(model_dtype) if model_dtype and canonical(model_dtype) else "model.dtype",
        "other_dtype": torch_name(input_dtype) if input_dtype and canonical(input_dtype) else None,
        "file": frame.file if frame else None,
        "line": frame.line if frame else None,
    }
    location = None
    if frame or hit.rank is not None:
        location = Location(
            module=module_expr.removeprefix("self.") if module_expr else None,
            op=op_of(hit.frames),
            file=frame.file if frame else None,
            line=frame.line if frame else None,
            function=frame.function if frame else None,
            rank=min(hit.ranks) if hit.ranks else hit.rank,
        )
    evidence = list(hit.evidence)
    if frame and frame.log_line:
        evidence.insert(1, Evidence(text=frame.describe()[:500], line=frame.log_line, source=hit.source))
    data: dict[str, object] = {"context": sorted(tags)}
    if hit.pattern.note:
        data["spelling"] = hit.pattern.note
    if code != hit.code:
        data["refined_from"] = hit.code
        data["decided_by"] = dict(hit.why)
        shown = {t: n for t, n in hit.why.items() if t not in hit.env}
        decided = ", ".join(f"{tag} ({needle!r})" for tag, needle in shown.items())
        said = f"the text shows {decided}" if decided else "the text alone leaves it open"
        if hit.env:
            data["decided_by_environment"] = dict(hit.env)
            said += "; this machine has " + ", ".join(hit.env.values()) + " (environment evidence)"
        evidence.append(Evidence(text=f"{hit.code} → {code}: {said}", source=hit.source))
    if hit.ranks:
        data["ranks"] = sorted(hit.ranks)
    info = {k: v for k, v in hit.match.groupdict().items() if k in hit.pattern.info and v}
    if info:
        data.update(info)
    confidence = max(hit.pattern.confidence, 0.85) if code != hit.code else hit.pattern.confidence
    if hit.env:
        confidence = min(confidence, 0.6)  # a fact about this machine, which may not be the one that failed
    return catalog.finding(
        code,
        context=tags,
        names=names,
        message=_message(hit, operands, module_expr, arg, frame, note),
        location=location,
        operands=operands,
        evidence=evidence,
        count=hit.count,
        confidence=round(confidence, 2),
        data=data,
    )


def _message(
    hit: Hit,
    operands: list[Operand],
    module_expr: str | None,
    arg: str | None,
    frame: Frame | None,
    note: str,
) -> str:
    parts = []
    where_is = devices(hit.pattern, hit.match) if _LEGACY.search(hit.match.group(0)) else {}
    where = ", ".join(f"{dict(hit.pattern.roles).get(k, k)} on {d}" for k, d in where_is.items())
    if hit.code == DEVICE_MISMATCH and where:
        parts.append(f"not a dtype problem: {where}")
    elif operands:
        parts.append(", ".join(f"{o.role}: {o.dtype}" for o in operands if o.dtype))
    if hit.code != DEVICE_MISMATCH and len(set(where_is.values())) > 1:
        parts.append(f"and the devices differ too: {where}")
    if module_expr:
        parts.append(f"raised in {module_expr}({arg or ''})")
    if frame:
        parts.append(f"at {frame.file}:{frame.line} in {frame.function}")
    if hit.ranks and len(hit.ranks) > 1:
        parts.append(f"on ranks {', '.join(map(str, sorted(hit.ranks)))}")
    if note:
        parts.append(f"({note})")
    if hit.pattern.note and not parts:
        parts.append(hit.pattern.note)
    text = "; ".join(p for p in parts if p)
    return text[:1].upper() + text[1:] if text else ""


def _first_line(f: Finding) -> int:
    return min((e.line for e in f.evidence if e.line is not None), default=0)
