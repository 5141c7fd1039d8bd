"""Error text, traceback or whole log → findings, through the catalog. Never imports torch.

The scan is built for 50 MB logs: one pass of a combined needle regex (literal substrings
taken from every family's patterns) finds candidate lines; only those lines meet the family
regexes, and only the first occurrences of each distinct error pay for the walk up their
traceback. Everything else is counting.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache, lru_cache

from .. import catalog

from ..catalog.context import CONTEXT_SIGNALS, REFINEMENTS
from ..catalog.errors import TRIGGERS
from ..catalog.model import ContextSignal, MessagePattern
from ..dtypes import canonical, is_low_precision, torch_name
from ..report import Evidence, Finding, Location, Operand, Report, Severity
from ..tracebacks import Frame, call_hint, culprit_frame, frames_above, is_frame_line, op_of, split_rank
from .fallback import fallback
from .normalize import clean, decode, view

__all__ = ["explain", "explain_sources"]

WINDOW = 64 * 1024  # bytes of input above an error line searched for its traceback
TRACED_PER_ERROR = 64  # occurrences of one error text whose traceback is parsed; later ones are counted
MAX_EVIDENCE = 8
BELOW = 30  # lines after an error line read for its context
_MISMATCH_CODES = frozenset(
    {
        "scalar-type-mismatch",
        "matmul-dtype-mismatch",
        "norm-dtype-mismatch",
        "conv-weight-dtype-mismatch",
        "conv-bias-dtype-mismatch",
        "attention-dtype-mismatch",
        "index-put-dtype-mismatch",
    }
)
_LEGACY = re.compile(r"Tensor\b|Type\b|\bbackend\b")  # type names that carry the device
_PARAM_ROLES = ("weight", "bias", "m2", "right", "batch2", "destination", "parameters (required)", "expected")
_SEVERITY_ORDER = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


@dataclass(frozen=True)
class _Compiled:
    triggers: tuple[str, ...]
    by_needle: dict[str, list[tuple[str, MessagePattern]]]
    signals: dict[str, tuple[ContextSignal, ...]]


@lru_cache(maxsize=1)
def _compiled() -> _Compiled:
    by_needle: dict[str, list[tuple[str, MessagePattern]]] = {}
    for fam in catalog.FAMILIES:
        for pat in fam.patterns:
            for needle in pat.needles:
                by_needle.setdefault(needle.lower(), []).append((fam.code, pat))
    uncovered = [n for n in by_needle if not any(t in n for t in TRIGGERS)]  # both lower-case
    signals: dict[str, list[ContextSignal]] = {}
    for sig in CONTEXT_SIGNALS:
        signals.setdefault(sig.scope, []).append(sig)
    return _Compiled((*TRIGGERS, *uncovered), by_needle, {k: tuple(v) for k, v in signals.items()})


@cache
def _regex(pat: MessagePattern) -> re.Pattern[str]:
    """Compiled on first use: a one-line `explain` compiles 2 regexes, not 80 (start-up budget)."""
    return re.compile(pat.regex, re.IGNORECASE if pat.ignorecase else 0)


def _lower(text: str) -> str:
    """Lower-cased text with the same offsets (a few characters grow when lower-cased)."""
    low = text.lower()
    if len(low) == len(text):
        return low
    return "".join(c if len(c.lower()) != 1 else c.lower() for c in text)


def _candidate_lines(text: str, low: str) -> list[int]:
    """Start offsets of the lines holding a trigger, in order: one str.find pass per trigger.

    Triggers are lower-case and searched in the lower-cased text: messages come in any case.
    """
    starts: set[int] = set()
    find, rfind = low.find, text.rfind
    for trigger in _compiled().triggers:
        p = find(trigger)
        while p != -1:
            starts.add(rfind("\n", 0, p) + 1)
            end = find("\n", p)
            if end == -1:
                break
            p = find(trigger, end)
    return sorted(starts)


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
        log_tags = _tags(text, _compiled().signals.get("log", ()))
        _scan(text, source, log_tags, hits)
        tails.append((source, text))
        if source:
            names.append(source)
    report = Report(tool="explain", meta={"sources": names} if names else {})
    found = [hit for group in hits.values() for hit in group]
    findings = _findings(found) if found else [fallback(tails)]
    findings.sort(key=lambda f: (_SEVERITY_ORDER[f.severity], -f.confidence, _first_line(f)))
    report.findings = findings
    return report


# ---- scan ------------------------------------------------------------------------------------------


def _scan(text: str, source: str | None, log_tags: dict[str, str], hits: dict[tuple, list[_Hit]]) -> None:
    line_no = 1
    counted_to = 0
    size = len(text)
    for start in _candidate_lines(text, _lower(text)):
        end = text.find("\n", start)
        if end == -1:
            end = size
        line_no += text.count("\n", counted_to, start)
        counted_to = start
        line = text[start:end].rstrip("\r")
        if is_frame_line(line) or _is_frame_code(text, start):
            continue  # `raise ValueError("Attempting to unscale ...")` quoted in a frame: not a second error
        found = _match_line(line) or _match_wrapped(text, start, end, line)
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
        else:
            hit = group[-1]
            hit.count += 1
        new_rank = rank is not None and rank not in hit.ranks
        if new_rank:
            hit.ranks.append(rank)
        new_source = not any(e.source == source for e in hit.evidence)
        if (hit.count == 1 or new_rank or new_source) and len(hit.evidence) < MAX_EVIDENCE:
            hit.evidence.append(Evidence(text=line.strip()[:500], line=line_no, source=source))


def _match_wrapped(text: str, start: int, end: int, line: str) -> tuple[str, MessagePattern, re.Match[str]] | None:
    """A message wrapped over lines (a terminal, a forum post): this line joined with its neighbours."""
    after = end
    joined = line
    for _ in range(2):  # the next two lines, unless they start a frame
        if after >= len(text):
            break
        nxt_end = text.find("\n", after + 1)
        nxt = text[after + 1 : nxt_end if nxt_end != -1 else len(text)]
        if not nxt.strip() or is_frame_line(nxt):
            break
        joined = f"{joined} {nxt.strip()}"
        after = nxt_end if nxt_end != -1 else len(text)
        found = _match_line(joined[:2000])
        if found:
            return found
    if start > 0:
        prev = text[text.rfind("\n", 0, start - 1) + 1 : start - 1]
        if prev.strip() and not is_frame_line(prev):
            return _match_line(f"{prev} {line.strip()}"[-2000:])
    return None


def _match_line(line: str) -> tuple[str, MessagePattern, re.Match[str]] | None:
    """The most confident family pattern matching this line's view (its needles are in it)."""
    best: tuple[str, MessagePattern, re.Match[str]] | None = None
    seen: set[int] = set()
    line = view(line)
    low = line.lower()
    for needle, entries in _compiled().by_needle.items():
        if needle not in low:
            continue
        for code, pat in entries:
            if id(pat) in seen:
                continue
            seen.add(id(pat))
            m = _regex(pat).search(line)
            if (
                m
                and _fits(code, pat, m)
                and (best is None or pat.confidence > best[1].confidence)
            ):
                best = (code, pat, m)
    return best


def _fits(code: str, pat: MessagePattern, m: re.Match[str]) -> bool:
    if code == "device-mismatch":
        return len(set(_devices(pat, m).values())) != 1
    return not code.endswith("-mismatch") or _dtypes_differ(pat, m)


def _devices(pat: MessagePattern, m: re.Match[str]) -> dict[str, str]:
    """Operand group → device, from legacy type names (torch.cuda.FloatTensor) or backend names."""
    return {
        k: "CUDA" if "cuda" in v.lower() else "CPU"
        for k, v in m.groupdict().items()
        if v and k not in pat.info
    }


def _dtypes_differ(pat: MessagePattern, m: re.Match[str]) -> bool:
    """False when a mismatch message names one dtype twice: that is not a dtype problem.

    `Input type (torch.FloatTensor) and weight type (torch.cuda.FloatTensor)` is a device mismatch.
    """
    names = {canonical(v) or v for k, v in m.groupdict().items() if v and k not in pat.info}
    operands = sum(1 for k, v in m.groupdict().items() if v and k not in pat.info)
    return operands < 2 or len(names) > 1


def _is_frame_code(text: str, start: int) -> bool:
    """Is the line starting at `start` the quoted source line below a `File "...", line N` line?"""
    if start == 0:
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
    signals = _compiled().signals
    end = start
    for _ in range(BELOW):  # words after the message: a pasted excerpt often puts the traceback below
        nxt = text.find("\n", end + 1)
        if nxt == -1:
            end = len(text)
            break
        end = nxt
    local_text = "\n".join([hit.body, *read, text[start:end]])
    op_text = "\n".join(f"{f.file} {f.function} {f.code or ''}" for f in frames[-2:]) + "\n" + hit.body
    if not frames:  # frames below the message (a pasted excerpt): their calls name the op
        op_text += "\n" + text[start:end]
    why = dict(log_tags)
    why.update(_tags(local_text, signals.get("local", ())))
    why.update(_tags(op_text, signals.get("op", ())))
    hit.why = why
    hit.tags = set(why)


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
        if value is None or group in pat.info:
            continue
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
    devices = _devices(hit.pattern, hit.match) if _LEGACY.search(hit.match.group(0)) else {}
    where = ", ".join(f"{dict(hit.pattern.roles).get(k, k)} on {d}" for k, d in devices.items())
    if hit.code == "device-mismatch" and where:
        parts.append(f"not a dtype problem: {where}")
    elif operands:
        parts.append(", ".join(f"{o.role}: {o.dtype}" for o in operands if o.dtype))
    if hit.code != "device-mismatch" and len(set(devices.values())) > 1:
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
