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
from ..catalog.model import ContextSignal, MessagePattern
from ..dtypes import canonical, is_low_precision, torch_name
from ..report import Evidence, Finding, Location, Operand, Report, Severity
from .environment import Environment
from .match import (
    Prefilter,
    candidate_lines,
    compiled,
    devices,
    lower,
    match_line,
    match_wrapped,
    no_operands,
)
from .stream import AHEAD, HISTORY, Sample, Source, blocks
from .tracebacks import Frame, call_hint, culprit_frame, frames_above, is_frame_line, op_of, split_rank

__all__ = ["explain", "explain_sources"]

WINDOW = 64 * 1024  # bytes of input above an error line searched for its traceback
TRACED_PER_ERROR = 64  # occurrences of one error text whose traceback is parsed; later ones are counted
MAX_EVIDENCE = 8
BELOW = 30  # lines after an error line read for its context
LONG_LINE = 4096  # a longer line is matched around its first trigger only
MAX_DISTINCT = 4096  # distinct error texts kept apart; later new ones fold into their family's first
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
    log_tags: dict[str, str] = field(default_factory=dict)  # the input's facts (filled while it streams)
    env: dict[str, str] = field(default_factory=dict)  # tags of this machine that decided the family


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
    hits: dict[tuple, list[_Hit]] = {}
    samples: list[Sample] = []
    names: list[str] = []
    for source, raw in sources:
        if not isinstance(raw, (str, bytes, bytearray)) and not hasattr(raw, "read"):
            raise TypeError(f"explain expects str, bytes or a binary file, got {type(raw).__name__}")
        sample = Sample(source)
        _Scanner(source, hits, sample).run(raw)
        samples.append(sample)
        if source:
            names.append(source)
    if not hits:
        for sample in samples:
            whole = sample.whole()
            if whole is not None:  # a short paste wrapped anywhere, even inside a trigger
                _Scanner(sample.source, hits, None).scan(_joined(whole), 0, None, 1)
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


# ---- scan ------------------------------------------------------------------------------------------


class _Scanner:
    """One input read block by block through a window: HISTORY characters above, AHEAD lines below."""

    def __init__(self, source: str | None, hits: dict[tuple, list[_Hit]], sample: Sample | None) -> None:
        self.source = source
        self.hits = hits
        self.sample = sample
        self.log_tags: dict[str, str] = {}  # filled as the input streams; read when findings are built
        self.log_signals = compiled().signals.get("log", ())

    def run(self, raw: Source) -> None:
        history, pending, line_no = "", "", 1  # line_no: number of pending's first line
        for block in blocks(raw):
            if self.sample is not None:
                self.sample.add(block)
            if len(self.log_tags) < len(self.log_signals):
                for tag, needle in _tags(block, self.log_signals).items():
                    self.log_tags.setdefault(tag, needle)
            pending += block
            cut = _before_last_lines(pending, AHEAD)
            if cut <= 0:
                continue
            text = history + pending
            self.scan(text, len(history), len(history) + cut, line_no)
            line_no += pending.count("\n", 0, cut)
            history, pending = _keep_end(text[: len(history) + cut], HISTORY), pending[cut:]
        if pending:
            self.scan(history + pending, len(history), None, line_no)
        whole = self.sample.whole() if self.sample is not None else None
        if whole is not None:  # a short paste is one context: code or words above its traceback count
            for tag, needle in _tags(whole, compiled().signals.get("local", ())).items():
                self.log_tags.setdefault(tag, needle)

    def scan(self, text: str, lo: int, hi: int | None, line_no: int) -> None:
        """Match the candidate lines starting in text[lo:hi]; `line_no` is the number of the line at lo."""
        hits, source = self.hits, self.source
        counted_to = lo
        size = len(text)
        low = lower(text)
        prefilter = Prefilter(low)
        for start, present in candidate_lines(text, low, lo, size if hi is None else hi, prefilter):
            end = text.find("\n", start)
            if end == -1:
                end = size
            line_no += text.count("\n", counted_to, start)
            counted_to = start
            if not prefilter.could_match(present, start, end):
                continue  # a trigger word, no message around it: `precision=bf16`
            if (
                end - start > LONG_LINE
            ):  # a message is short: match the part of a huge line around its trigger
                at = min(p for p in (low.find(t, start, end) for t in present) if p != -1)
                start, end = max(start, at - 1024), min(end, at + LONG_LINE - 1024)
            line = text[start:end].rstrip("\r")
            if is_frame_line(line) or _is_frame_code(text, start):
                continue  # `raise ValueError("Attempting to unscale ...")` quoted in a frame: not a second error
            found = match_line(line, present)
            if found is None or no_operands(found):  # the rest of the message may be on the next line
                found = match_wrapped(text, start, end, line) or found
            if found is None:
                continue
            code, pattern, match = found
            rank, body = split_rank(line)
            key = (code, match.group(0)[:500])  # the message itself, whatever prefix the logger added
            if key not in hits and len(hits) >= MAX_DISTINCT:
                key = next((k for k in hits if k[0] == code), key)  # bounded: fold into its family's first
            group = hits.setdefault(key, [])
            traced = sum(h.traced for h in group)
            if traced < TRACED_PER_ERROR:
                # the same text raised at another place is another finding: trace, then fold by place
                probe = _Hit(
                    code, pattern, match, body.strip(), line_no, source, rank, log_tags=self.log_tags
                )
                _trace(probe, text, start)
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


def _before_last_lines(text: str, n: int) -> int:
    """Offset just after the line end that has `n` more line ends after it (0 when there are fewer)."""
    end = len(text)
    for _ in range(n + 1):
        end = text.rfind("\n", 0, end)
        if end == -1:
            return 0
    return end + 1


def _keep_end(text: str, limit: int) -> str:
    """The last whole lines of `text` that fit in `limit` characters."""
    if len(text) <= limit:
        return text
    start = text.find("\n", len(text) - limit)
    return text[start + 1 :] if start != -1 else ""


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


def _trace(hit: _Hit, text: str, start: int) -> None:
    lo = max(0, start - WINDOW)
    above = text[lo:start].split("\n")
    if above and above[-1] == "":
        above.pop()
    if lo > 0 and above:
        above.pop(0)  # partial line
    frames, read = frames_above(above, hit.rank, hit.line_no - len(above))
    hit.frames = frames
    frame = culprit_frame(frames)
    hit.place = (frame.file, frame.line, frame.function) if frame else None
    signals = compiled().signals
    below = "" if frames else _below(text, start)
    local_text = "\n".join([hit.body, *read, below])
    op_text = "\n".join(f"{f.file} {f.function} {f.code or ''}" for f in frames[-2:]) + "\n" + hit.body
    op_text += "\n" + below
    why = _tags(local_text, signals.get("local", ()))
    why.update(_tags(op_text, signals.get("op", ())))
    hit.why = why


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


def _findings(hits: list[_Hit], env: Environment | None) -> list[Finding]:
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
