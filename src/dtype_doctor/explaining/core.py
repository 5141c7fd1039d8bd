"""Error text, traceback or whole log → findings, through the catalog. Never imports torch.

The scan is built for 50 MB logs: `match` finds candidate lines with one pass per trigger and
matches only those; only the first occurrences of each distinct error pay for the walk up their
traceback (and the evidence stage: frames, words around, set-up) that may refine the family.
Everything else is counting. Text with no message goes to `fallback`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from .. import catalog
from ..catalog.context import REFINEMENTS
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
from ..catalog.model import ContextSignal, MessagePattern
from ..dtypes import canonical, is_low_precision, torch_name
from ..report import Evidence, Finding, Location, Operand, Report, Severity
from .match import candidate_lines, compiled, devices, lower, match_line, match_wrapped, no_operands
from .normalize import clean, decode
from .tracebacks import Frame, call_hint, culprit_frame, frames_above, is_frame_line, op_of, split_rank

__all__ = ["explain", "explain_sources"]

WINDOW = 64 * 1024  # bytes of input above an error line searched for its traceback
TRACED_PER_ERROR = 64  # occurrences of one error text whose traceback is parsed; later ones are counted
MAX_EVIDENCE = 8
BELOW = 30  # lines after an error line read for its context
JOIN_LIMIT = 16 * 1024  # a text this short with no message found is also read as one joined line
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
_EXCEPTION_LINE = re.compile(r"[\w.]{0,120}(?:Error|Exception|Warning|Exit|Interrupt)\b:")
_PARAM_ROLES = ("weight", "bias", "m2", "right", "batch2", "destination", "parameters (required)", "expected")
_SEVERITY_ORDER = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


@dataclass
class _Hit:
    """One matched error line (all its occurrences, once folded)."""

    code: str
    pattern: MessagePattern
    match: re.Match[str]
    body: str
    line_no: int
    source: str | None
    rank: int | None
    frames: list[Frame] = field(default_factory=list)
    tags: set[str] = field(default_factory=set)
    why: dict[str, str] = field(default_factory=dict)  # context tag → the text that set it
    count: int = 1
    ranks: list[int] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)
    traced: int = 1
    place: tuple | None = None  # (file, line) of the culprit frame, once traced


def explain(text: str | bytes, source: str | None = None) -> Report:
    """Diagnose an error message, a traceback or a whole log.

    >>> explain("mat1 and mat2 must have the same dtype, but got Float and Half").codes()
    ['matmul-dtype-mismatch']
    """
    return explain_sources([(source, text)])


def explain_sources(sources: Iterable[tuple[str | None, str | bytes]]) -> Report:
    """Like `explain`, over several inputs (e.g. one log per rank); duplicates fold across them."""
    hits: dict[tuple, list[_Hit]] = {}
    tails: list[tuple[str | None, str]] = []
    names: list[str] = []
    for source, raw in sources:
        if not isinstance(raw, (str, bytes, bytearray)):
            raise TypeError(f"explain expects str or bytes, got {type(raw).__name__}")
        text = clean(decode(raw) if not isinstance(raw, str) else raw)
        log_tags = _tags(text, compiled().signals.get("log", ()))
        _scan(text, source, log_tags, hits)
        tails.append((source, text))
        if source:
            names.append(source)
    if not hits:
        for source, text in tails:
            if len(text) <= JOIN_LIMIT:  # a short paste wrapped anywhere, even inside a trigger
                _scan(_joined(text), source, {}, hits)
    report = Report(tool="explain", meta={"sources": names} if names else {})
    found = [hit for group in hits.values() for hit in group]
    if found:
        findings = _findings(found)
    else:
        from .fallback import fallback  # only text without a known message pays for its import

        findings = [fallback(tails)]
    findings.sort(key=lambda f: (_SEVERITY_ORDER[f.severity], -f.confidence, _first_line(f)))
    report.findings = findings
    return report


# ---- scan ------------------------------------------------------------------------------------------


def _scan(text: str, source: str | None, log_tags: dict[str, str], hits: dict[tuple, list[_Hit]]) -> None:
    line_no = 1
    counted_to = 0
    size = len(text)
    for start in candidate_lines(text, lower(text)):
        end = text.find("\n", start)
        if end == -1:
            end = size
        line_no += text.count("\n", counted_to, start)
        counted_to = start
        line = text[start:end].rstrip("\r")
        if is_frame_line(line) or _is_frame_code(text, start):
            continue  # `raise ValueError("Attempting to unscale ...")` quoted in a frame: not a second error
        found = match_line(line)
        if found is None or no_operands(found):  # the rest of the message may be on the next line
            found = match_wrapped(text, start, end, line) or found
        if found is None:
            continue
        code, pattern, match = found
        rank, body = split_rank(line)
        key = (code, match.group(0)[:500])  # the message itself, whatever prefix the logger added
        group = hits.setdefault(key, [])
        traced = sum(h.traced for h in group)
        if traced < TRACED_PER_ERROR:
            # the same text raised at another place is another finding: trace, then fold by place
            probe = _Hit(code, pattern, match, body.strip(), line_no, source, rank)
            _trace(probe, text, start, line_no, log_tags)
            if probe.place is None and group:  # a bare repeat (a logger line): the last traceback's error
                hit = group[-1]
            else:
                hit = next((h for h in group if h.place == probe.place), None)
            if hit is None:
                group.append(probe)
                hit = probe
            else:
                hit.count += 1
                hit.traced += 1
        else:  # past the tracing budget: counted apart, not on whichever place was traced last
            hit = next((h for h in group if h.traced == 0), None)
            if hit is None:
                hit = _Hit(code, pattern, match, body.strip(), line_no, source, rank, traced=0)
                group.append(hit)
            else:
                hit.count += 1
        new_rank = rank is not None and rank not in hit.ranks
        if new_rank:
            hit.ranks.append(rank)
        new_source = not any(e.source == source for e in hit.evidence)
        if (hit.count == 1 or new_rank or new_source) and len(hit.evidence) < MAX_EVIDENCE:
            hit.evidence.append(Evidence(text=line.strip()[:500], line=line_no, source=source))


def _joined(text: str) -> str:
    """A short text as one line: its message lines joined, frames and their code left out."""
    lines = text.split("\n")
    keep = []
    for i, line in enumerate(lines):
        body = split_rank(line)[1].strip()
        if not body or is_frame_line(line) or (i and is_frame_line(lines[i - 1])):
            continue
        keep.append(body)
    return " ".join(keep)


def _is_frame_code(text: str, start: int) -> bool:
    """Is the line starting at `start` the quoted source line below a `File "...", line N` line?

    Frames of `python -c`, `exec` or a `.pyc` have no source line: an exception line right below
    a frame is the error, not code.
    """
    if start == 0 or _EXCEPTION_LINE.match(split_rank(text[start : start + 300])[1]):
        return False
    prev_start = text.rfind("\n", 0, start - 1) + 1
    prev = text[prev_start : start - 1]
    return 'File "' in prev and ", line " in prev


def _trace(hit: _Hit, text: str, start: int, line_no: int, log_tags: dict[str, str]) -> None:
    lo = max(0, start - WINDOW)
    above = text[lo:start].split("\n")
    if above and above[-1] == "":
        above.pop()
    if lo > 0 and above:
        above.pop(0)  # partial line
    frames, read = frames_above(above, hit.rank, line_no - len(above))
    hit.frames = frames
    frame = culprit_frame(frames)
    hit.place = (frame.file, frame.line, frame.function) if frame else None
    signals = compiled().signals
    below = "" if frames else _below(text, start)
    local_text = "\n".join([hit.body, *read, below])
    op_text = "\n".join(f"{f.file} {f.function} {f.code or ''}" for f in frames[-2:]) + "\n" + hit.body
    op_text += "\n" + below
    why = dict(log_tags)
    why.update(_tags(local_text, signals.get("local", ())))
    why.update(_tags(op_text, signals.get("op", ())))
    hit.why = why
    hit.tags = set(why)


def _below(text: str, start: int) -> str:
    """The lines after a message that has no traceback above it (a pasted excerpt).

    An excerpt often puts its traceback and its words below the message. A message under its own
    traceback, as in a log, is not read past: what follows it is the next thing the program printed.
    """
    end = start
    for _ in range(BELOW):
        nxt = text.find("\n", end + 1)
        if nxt == -1:
            return text[start:]
        end = nxt
    return text[start:end]


def _tags(text: str, signals: Iterable[ContextSignal]) -> dict[str, str]:
    """Context tags the text shows, each with the needle that set it (shown to the user)."""
    tags: dict[str, str] = {}
    low: str | None = None
    for sig in signals:
        if sig.tag in tags:
            continue
        if sig.ignorecase:
            low = low if low is not None else text.lower()
            hay = low
        else:
            hay = text
        needle = next((n for n in sig.needles if n in hay), None)
        if needle is not None:
            tags[sig.tag] = needle
    return tags


# ---- findings ------------------------------------------------------------------------------------


def _operands(hit: _Hit, roles: dict[str, str]) -> list[Operand]:
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


def _refine(code: str, tags: set[str]) -> tuple[str, dict[str, str], str, frozenset[str]]:
    """The family the context makes of a message's family, and the tags that decided it."""
    for ref in REFINEMENTS:
        if code in ref.codes and ref.when <= tags and not (ref.unless & tags):
            return ref.to, dict(ref.roles), ref.note, ref.when
    return code, {}, "", frozenset()


def _findings(hits: list[_Hit]) -> list[Finding]:
    prepared = []
    for hit in hits:
        for tag in hit.pattern.tags:
            hit.tags.add(tag)
            hit.why.setdefault(tag, hit.match.group(0)[:80])
        for op in (canonical(v) for k, v in hit.match.groupdict().items() if v and k not in hit.pattern.info):
            if op:
                hit.tags.add(f"dtype-{op}")
        code, roles, note, decided = _refine(hit.code, hit.tags)
        hit.why = {t: hit.why.get(t, t) for t in sorted(decided)}
        operands = _operands(hit, roles)
        prepared.append((hit, code, operands, note))
    distinct = {
        (c, tuple((o.role, o.dtype) for o in ops)) for _, c, ops, _ in prepared if c in _MISMATCH_CODES
    }
    multi = len(distinct) >= 2
    return [_finding(hit, code, operands, note, multi) for hit, code, operands, note in prepared]


def _finding(hit: _Hit, code: str, operands: list[Operand], note: str, multi: bool) -> Finding:
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
        decided = ", ".join(f"{tag} ({needle!r})" for tag, needle in hit.why.items())
        evidence.append(Evidence(text=f"{hit.code} → {code}: the text shows {decided}", source=hit.source))
    if hit.ranks:
        data["ranks"] = sorted(hit.ranks)
    info = {k: v for k, v in hit.match.groupdict().items() if k in hit.pattern.info and v}
    if info:
        data.update(info)
    confidence = max(hit.pattern.confidence, 0.85) if code != hit.code else hit.pattern.confidence
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
    hit: _Hit,
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
