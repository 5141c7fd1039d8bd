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
    groups: tuple[tuple[str, tuple[str, ...]], ...]  # one find pass per key: the triggers holding it


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
    groups: dict[str, list[str]] = {}
    for trigger in triggers:
        key = next((k for k in _GROUP_KEYS if k in trigger), trigger)
        groups.setdefault(key, []).append(trigger)
    return _Compiled(
        triggers,
        by_needle,
        {k: tuple(v) for k, v in signals.items()},
        trigger_rx,
        tuple((k, tuple(v)) for k, v in groups.items()),
    )


# substrings shared by several triggers, searched once for all of them (fewer passes over a big log)
_GROUP_KEYS = ("type", "scale", "expected ", "skip", "f16", "mps ", "tensor")


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


def candidate_lines(
    text: str, low: str, lo: int = 0, hi: int | None = None, prefilter: Prefilter | None = None
) -> list[tuple[int, frozenset[str]]]:
    """Start offsets of the lines starting in text[lo:hi] that hold a trigger, in order, each with
    the triggers it holds: one str.find pass per trigger.

    Triggers are lower-case and searched in the lower-cased text: messages come in any case.
    """
    hi = len(text) if hi is None else hi
    starts: dict[int, set[str]] = {}
    find, rfind = low.find, text.rfind
    for key, members in compiled().groups:
        p = find(key, lo)
        if p == -1:
            continue
        if prefilter is not None:
            members = tuple(m for m in members if prefilter.live(m))
            if not members:
                continue  # no needle they lead to has all its words in this text: skip their occurrences
        while p != -1:
            start = rfind("\n", 0, p) + 1
            if start >= hi:
                break
            end = find("\n", p)
            if start >= lo:
                line = low[start : len(low) if end == -1 else end]
                held = [m for m in members if m == key or m in line]
                if held:
                    starts.setdefault(start, set()).update(held)
            if end == -1:
                break
            p = find(key, end)
    return [(start, frozenset(starts[start])) for start in sorted(starts)]


_WORD = re.compile(r"[a-z0-9_]+")
_DTYPE_WORDS = frozenset(
    ("float16", "bfloat16", "float32", "float64", "int64", "int32", "int8", "uint8", "half", "float", "double",
     "bf16", "fp16", "fp32", "long", "int", "bool")
)  # fmt: skip


@lru_cache(maxsize=256)
def _keys_for(present: frozenset[str]) -> tuple[frozenset[str], ...] | None:
    """The words of each needle these triggers can lead to that no normalisation rewrites (not dtypes).

    None when a needle is a bare dtype name: then every such line is matched.
    """
    needs = set()
    for needle, _ in _needles_for(present):
        words = frozenset(w for w in _WORD.findall(needle) if w not in _DTYPE_WORDS and not canonical(w))
        if words:
            needs.add(words)
        elif needle.strip() in _DTYPE_WORDS:
            return None  # a bare dtype name: the view may have made it from another spelling
        else:
            needs.add(frozenset([needle]))  # `__half`: a spelling the view keeps
    return tuple(needs)


_UNSET: tuple = ("unset",)


class Prefilter:
    """Which candidate lines of one text can hold a message: all the words of one needle are there.

    Decided per trigger set for the whole text first (a word absent from the text rules out its
    needle everywhere), then around the line (the line and two lines on each side, for a wrapped
    message). A line with a trigger word and no message (`precision=bf16`, `dtype: float32` in a
    config dump) costs a dictionary look-up instead of a normalised view.
    """

    def __init__(self, low: str) -> None:
        self.low = low
        self._viable: dict[frozenset[str], tuple | None] = {}

    def _viable_for(self, present: frozenset[str]) -> tuple | None:
        viable = self._viable.get(present, _UNSET)
        if viable is _UNSET:
            keys = _keys_for(present)
            viable = None if keys is None else tuple(ws for ws in keys if all(w in self.low for w in ws))
            self._viable[present] = viable
        return viable

    def live(self, trigger: str) -> bool:
        """Can a line holding this trigger hold a message anywhere in this text?"""
        return self._viable_for(frozenset([trigger])) != ()

    def could_match(self, present: frozenset[str], start: int, end: int) -> bool:
        viable = self._viable_for(present)
        if viable is None:
            return True
        if not viable:
            return False
        low = self.low
        a = start
        for _ in range(2):
            if a <= 0:
                break
            a = low.rfind("\n", 0, a - 1) + 1
        b = end
        for _ in range(2):
            if b >= len(low):
                break
            nxt = low.find("\n", b + 1)
            b = len(low) if nxt == -1 else nxt
        window = low[max(a, start - 2000) : min(b, end + 2000)]
        return any(all(w in window for w in ws) for ws in viable)


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


def match_line(line: str, present: frozenset[str] | None = None) -> Found | None:
    """The most confident family pattern matching this line's view (its needles are in it).

    Only the needles that go with the triggers found in the line (`present`, when the caller
    knows them) are looked for: a log of 100 000 `loss: nan` lines checks the few `nan` needles
    per line, not all of them.
    """
    best: tuple[str, MessagePattern, re.Match[str]] | None = None
    seen: set[int] = set()
    if present is None:
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
