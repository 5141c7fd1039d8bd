"""Which family pattern a line's normalised view matches: the one-pass trigger scan and the regexes.

Triggers (lower-case, dtype-free) find candidate lines in one `str.find` pass each over the
lower-cased text; only those lines are normalised (`normalize.view`) and meet the needles and
regexes of the families. A message wrapped over lines is tried joined with its neighbours.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache, lru_cache

from .. import catalog
from ..catalog.context import CONTEXT_SIGNALS
from ..catalog.errors import TRIGGERS
from ..catalog.family_codes import DEVICE_MISMATCH
from ..catalog.model import ContextSignal, MessagePattern
from ..dtypes import canonical
from .normalize import view
from .tracebacks import is_frame_line, split_rank

Found = tuple[str, MessagePattern, re.Match[str]]
_DEVICES = (
    ("cuda", "CUDA"),
    ("gpu", "CUDA"),
    ("mps", "MPS"),
    ("xpu", "XPU"),
    ("hip", "ROCm"),
    ("meta", "meta"),
)


@dataclass(frozen=True)
class _Compiled:
    triggers: tuple[str, ...]
    by_needle: dict[str, list[tuple[str, MessagePattern]]]
    signals: dict[str, tuple[ContextSignal, ...]]
    trigger_rx: re.Pattern[str]  # all triggers, longest first: which ones a candidate line holds


@lru_cache(maxsize=1)
def compiled() -> _Compiled:
    by_needle: dict[str, list[tuple[str, MessagePattern]]] = {}
    for fam in catalog.FAMILIES:
        for pat in fam.patterns:
            for needle in pat.needles:
                by_needle.setdefault(needle.lower(), []).append((fam.code, pat))
    uncovered = [n for n in by_needle if not any(t in n for t in TRIGGERS)]  # both lower-case
    signals: dict[str, list[ContextSignal]] = {}
    for sig in CONTEXT_SIGNALS:
        signals.setdefault(sig.scope, []).append(sig)
    triggers = (*TRIGGERS, *uncovered)
    # a lookahead finds overlapping triggers too (`Exception: InferDataType` holds `: inf` and `inferdatatype`)
    trigger_rx = re.compile("(?=(" + "|".join(map(re.escape, sorted(triggers, key=len, reverse=True))) + "))")
    return _Compiled(triggers, by_needle, {k: tuple(v) for k, v in signals.items()}, trigger_rx)


@cache
def _regex(pat: MessagePattern) -> re.Pattern[str]:
    """Compiled on first use: a one-line `explain` compiles 2 regexes, not 80 (start-up budget)."""
    return re.compile(pat.regex, re.IGNORECASE if pat.ignorecase else 0)


def lower(text: str) -> str:
    """Lower-cased text with the same offsets (a few characters grow when lower-cased)."""
    low = text.lower()
    if len(low) == len(text):
        return low
    return "".join(c if len(c.lower()) != 1 else c.lower() for c in text)


def candidate_lines(text: str, low: str) -> list[int]:
    """Start offsets of the lines holding a trigger, in order: one str.find pass per trigger.

    Triggers are lower-case and searched in the lower-cased text: messages come in any case.
    """
    starts: set[int] = set()
    find, rfind = low.find, text.rfind
    for trigger in compiled().triggers:
        p = find(trigger)
        while p != -1:
            starts.add(rfind("\n", 0, p) + 1)
            end = find("\n", p)
            if end == -1:
                break
            p = find(trigger, end)
    return sorted(starts)


def match_wrapped(text: str, start: int, end: int, line: str) -> Found | None:
    """A message wrapped over lines (a terminal, a forum post): this line joined with its neighbours.

    Up to two message lines before and after (not frames, not blank; a rank prefix on a continuation
    line dropped) are joined in widening windows; the most confident match wins (the smallest
    window on a tie): `... returned an / invalid gradient ... expected type / X but got Y` is the
    autograd engine's message, not the generic one its last two lines make.
    """
    before = _neighbours(text, start, -1)
    after = _neighbours(text, end, +1)
    windows = ((0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (2, 2))
    best: Found | None = None
    for back, ahead in windows:
        if back > len(before) or ahead > len(after):
            continue
        parts = [*before[:back][::-1], line.strip(), *after[:ahead]]
        found = match_line(" ".join(parts)[:4000])
        if found and (best is None or found[1].confidence > best[1].confidence):
            best = found
    return best


def _neighbours(text: str, edge: int, step: int) -> list[str]:
    """The (at most two) message lines before `edge` (step -1, nearest first) or after it (+1)."""
    out: list[str] = []
    pos = edge
    while len(out) < 2:
        if step > 0:
            if pos >= len(text):
                break
            nxt = text.find("\n", pos + 1)
            nxt = len(text) if nxt == -1 else nxt
            piece, pos = text[pos + 1 : nxt], nxt
        else:
            if pos <= 0:
                break
            prev = text.rfind("\n", 0, pos - 1) + 1
            piece, pos = text[prev : pos - 1], prev
        body = split_rank(piece)[1].strip()
        if not body or is_frame_line(piece):
            break
        out.append(body)
    return out


@lru_cache(maxsize=256)
def _needles_for(triggers: frozenset[str]) -> tuple[tuple[str, list[tuple[str, MessagePattern]]], ...]:
    """The needles a line holding these triggers can hold (a trigger may be a dtype the view renames)."""
    inner = {s for t in triggers for s in compiled().triggers if s in t}  # hidden inside a longer one
    keys = triggers | inner | {view(t).lower() for t in triggers | inner}
    return tuple((n, e) for n, e in compiled().by_needle.items() if any(k in n for k in keys))


def match_line(line: str) -> Found | None:
    """The most confident family pattern matching this line's view (its needles are in it).

    Only the needles that go with the triggers found in the line are looked for: a log of 100 000
    `loss: nan` lines checks the few `nan` needles per line, not all of them.
    """
    best: tuple[str, MessagePattern, re.Match[str]] | None = None
    seen: set[int] = set()
    present = frozenset(compiled().trigger_rx.findall(line.lower()))
    line = view(line)
    low = line.lower()
    for needle, entries in _needles_for(present):
        if needle not in low:
            continue
        for code, pat in entries:
            if id(pat) in seen:
                continue
            seen.add(id(pat))
            m = _regex(pat).search(line)
            if m and _fits(code, pat, m) and (best is None or pat.confidence > best[1].confidence):
                best = (code, pat, m)
    return best


def no_operands(found: Found) -> bool:
    _, pat, m = found
    groups = [k for k in m.re.groupindex if k not in pat.info]
    return bool(groups) and not any(m.group(k) for k in groups)


def _fits(code: str, pat: MessagePattern, m: re.Match[str]) -> bool:
    if code == DEVICE_MISMATCH:
        return len(set(devices(pat, m).values())) != 1
    return not code.endswith("-mismatch") or _dtypes_differ(pat, m)


def devices(pat: MessagePattern, m: re.Match[str]) -> dict[str, str]:
    """Operand group → device, from legacy type names (torch.cuda.FloatTensor, MPSFloatType) or backends."""
    return {k: _device(v) for k, v in m.groupdict().items() if v and k not in pat.info}


def _device(spelling: str) -> str:
    low = spelling.lower()
    return next((name for key, name in _DEVICES if key in low), "CPU")


def _dtypes_differ(pat: MessagePattern, m: re.Match[str]) -> bool:
    """False when a mismatch message names one dtype twice: that is not a dtype problem.

    `Input type (torch.FloatTensor) and weight type (torch.cuda.FloatTensor)` is a device mismatch.
    """
    names = {canonical(v) or v for k, v in m.groupdict().items() if v and k not in pat.info}
    operands = sum(1 for k, v in m.groupdict().items() if v and k not in pat.info)
    return operands < 2 or len(names) > 1
