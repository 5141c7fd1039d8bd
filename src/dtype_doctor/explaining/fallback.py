"""Text in which no known program message matched: a symptom, the nearest family, or `unknown`.

Order: a symptom described in words (`catalog.symptoms.SYMPTOMS`) names its family with a lower
confidence and the command that would confirm it; otherwise, if the text shows any dtype or
precision evidence, the family sharing the most keywords with it (ties go to the families that
name a library or set-up: they are more telling than an op name); otherwise `unknown`,
with the nearest families listed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

from .. import catalog, remedies
from ..catalog.errors import ERROR_FAMILIES
from ..catalog.family_codes import GRAD_SCALER_OVERFLOW, SCALAR_TYPE_MISMATCH, UNKNOWN
from ..catalog.model import Family
from ..catalog.shared_remedies import CONFIRM
from ..catalog.symptoms import CHECK_COMMAND, DTYPE_EVIDENCE, NUMERICS, SETUP_FAMILIES, SYMPTOMS, Symptom
from ..report import Evidence, Finding
from .normalize import view
from .stream import Sample

GENERIC = SCALAR_TYPE_MISMATCH
_ERROR_LINE = re.compile(r"\b\w{0,60}(?:Error|Exception|Warning)\b:?[^\n]{0,300}")


@lru_cache(maxsize=1)
def _keyword_rx() -> re.Pattern[str]:
    words = sorted({k for fam in catalog.FAMILIES for k in fam.keywords}, key=len, reverse=True)
    return re.compile(r"(?<![a-z0-9_])(" + "|".join(map(re.escape, words)) + r")(?![a-z0-9_])")


@lru_cache(maxsize=1)
def _symptom_rx() -> tuple[tuple[Symptom, re.Pattern[str]], ...]:
    return tuple((s, re.compile(s.regex)) for s in SYMPTOMS)


def scale_collapse(low: str) -> str | None:
    """A loss scale told in numbers that collapses: `loss_scale 65536 ... 512 ... 2`, or one near 0.

    The values after `loss scale`/`loss_scale`/`grad_scale`/`get_scale()` in order (an arrow chain
    `65536 -> 32768 -> 1` counts each value); a collapse is a last value at most 1/64 of the first
    over three or more values, or any value below 2**-10 (GradScaler and the DeepSpeed/apex scalers
    start at 2**16 and halve on every overflow).
    """
    values: list[tuple[float, str]] = []
    for m in _SCALE_VALUE.finditer(low):
        said = m.group(0)
        for number in _NUMBER.findall(said):
            values.append((float(number), said))
        if len(values) >= 4096:
            break
    if not values:
        return None
    tiny = next((said for v, said in values if 0 <= v < 2**-10), None)
    if tiny is not None:
        return tiny.strip()
    first, last = values[0][0], values[-1][0]
    if len(values) >= 3 and last * 64 <= first and last <= min(v for v, _ in values[:-1]):
        return f"{values[0][1].strip()} ... {values[-1][1].strip()}"
    return None


_NUM = r"[0-9]{1,12}(?:\.[0-9]{0,20})?(?:e[-+]?[0-9]{1,3})?"
_NUMBER = re.compile(rf"(?<![\w.]){_NUM}")
_SCALE_VALUE = re.compile(
    r"(?:\b(?:loss[ _]?scal(?:e|er|ing)|grad(?:ient)?[ _]?scale)\b|\bget_scale\(\))[^\d\n|,;]{0,16}?"
    rf"{_NUM}(?:\s{{0,3}}(?:->|→|=>|to|then|,)\s{{0,3}}{_NUM}){{0,64}}"
)
# words of trouble; a "no problems found" or "0 errors" is not one
_TROUBLE = re.compile(
    r"\b(?:errors?|fail\w*|crash\w*|wrong|broken|breaks?|mismatch\w*|exceptions?|raise[sd]?|issues?|problems?"
    r"|bugs?|cannot|can't|can ?not|doesn't|does not|don't|won't|not work\w*|unsupported|not supported|incorrect"
    r"|invalid|diverg\w*|explod\w*|unstable|worse|slow\w*|garbage|refus\w*|complain\w*|warn\w*|traceback"
    r"|requires?|needs?|only|instead|why|how)\b|\?"
)
_NEGATED = re.compile(
    r"\b(?:no|0|zero|without|never|none)\s{1,3}(?:[a-z-]{1,20}\s{1,3}){0,2}?(?:problems?|errors?|issues?|warnings?"
    r"|mismatch\w*|failures?|exceptions?|bugs?)\b|\b(?:problems?|errors?|issues?)\s{0,3}(?:found)?:\s{0,3}(?:none|0)\b"
)


def _troubled(low: str) -> bool:
    """Does the text say something went wrong (or is it a short description, a question), rather than
    a clean log, a config dump or a tool's all-clear?"""
    if _NEGATED.search(low):
        low = _NEGATED.sub(" ", low)
    elif len(low) <= 300 and low.count("\n") <= 2 and len(_PROSE.findall(low)) >= 3:
        return True  # a sentence about dtypes: "trying flash-attention 2 on float32 tensors"
    return bool(_TROUBLE.search(low))


_PROSE = re.compile(r"(?<![\w=:./-])[a-z]{2,20}(?![\w=:./-])")


def nearest(words: set[str], families: Iterable[Family] = ERROR_FAMILIES) -> list[str]:
    """Families ranked by the keywords they share with the text (best first, at most 3).

    Error families by default: a text is named after an error, not after a check's finding.
    """
    scores = []
    for fam in families:
        score = sum(1 for k in fam.keywords if k in words)
        if score:
            scores.append((-score, fam.code not in SETUP_FAMILIES, fam.code))
    return [code for *_, code in sorted(scores)[:3]]


def fallback(inputs: list[Sample]) -> Finding:
    """The finding for inputs in which no message pattern matched (their head and tail are read)."""
    samples = [(sample.source, sample.chunks()) for sample in inputs]
    low = view("\n".join(chunk for _, chunks in samples for chunk, _ in chunks)).lower()
    words = set(_keyword_rx().findall(low))
    ranked = nearest(words)
    for symptom, rx in _symptom_rx():
        m = rx.search(low)
        if m:
            said = m.group(0).strip()
            return _symptom(symptom.code, symptom.confirm, symptom.confidence, said, samples, inputs, ranked)
    collapse = scale_collapse(low)
    if collapse:
        return _symptom(GRAD_SCALER_OVERFLOW, NUMERICS, 0.45, collapse, samples, inputs, ranked)
    evidence = re.search(DTYPE_EVIDENCE, low)
    if evidence and not _troubled(low):
        evidence = None  # dtype words and nothing wrong: a clean log, a config dump, an all-clear
    if evidence and ranked:  # about dtypes: the family sharing the most words with it
        shared = [k for k in catalog.family(ranked[0]).keywords if k in words]
        return _symptom(ranked[0], CHECK_COMMAND, 0.3, ", ".join(shared), samples, inputs, ranked)
    if evidence:  # about dtypes, no family's words: the generic family, at the lowest confidence
        return _symptom(GENERIC, CHECK_COMMAND, 0.2, evidence.group(0).strip(), samples, inputs, ranked)
    return _unknown(inputs, nearest(words, catalog.FAMILIES))


def _lines_with(samples: list[tuple[str | None, list[tuple[str, int]]]], needle: str) -> list[Evidence]:
    out = []
    for source, chunks in samples:
        for chunk, first in chunks:
            for n, line in enumerate(chunk.split("\n"), first):
                if needle in view(line).lower():
                    out.append(Evidence(text=line.strip()[:500], line=n, source=source))
                    if len(out) >= 3:
                        return out
    return out


def _symptom(
    code: str,
    confirm: str,
    confidence: float,
    said: str,
    samples: list[tuple[str | None, list[tuple[str, int]]]],
    inputs: list[Sample],
    ranked: list[str],
) -> Finding:
    why = f"No error message in the text; its words ({said!r}) describe {code}."
    finding = catalog.finding(
        code,
        context={"symptom"},
        message=f"{why} Confidence {confidence:.2f}, lower than for an error message: confirm it first.",
        evidence=_lines_with(samples, said.split(", ")[0]) or _last_lines(inputs),
        confidence=confidence,
        related=[c for c in ranked if c != code],
        data={"symptom": said, "nearest": ranked, "context": ["symptom"]},
    )
    finding.fixes = remedies.first(finding.fixes, remedies.make(CONFIRM, command=confirm))
    return finding


def _last_lines(samples: list[Sample]) -> list[Evidence]:
    evidence: list[Evidence] = []
    for sample in samples:
        text, first = sample.chunks()[-1]
        tail = text[-16 * 1024 :]
        base = first + text.count("\n", 0, len(text) - len(tail))
        numbered = [(base + i, ln.strip()) for i, ln in enumerate(tail.split("\n")) if ln.strip()]
        picked = [(n, ln) for n, ln in numbered if _ERROR_LINE.search(ln)][-3:] or numbered[-1:]
        evidence.extend(Evidence(text=ln[:500], line=n, source=sample.source) for n, ln in picked)
    return evidence


def _unknown(inputs: list[Sample], ranked: list[str]) -> Finding:
    """An honest `unknown`: the last error-looking lines, and the families sharing the most words."""
    if ranked:
        message = "No known mixed-precision error in this text. Nearest families: " + ", ".join(ranked) + "."
    else:
        message = "No known mixed-precision error in this text, and no dtype or precision words in it."
    return catalog.finding(
        UNKNOWN,
        message=message,
        evidence=_last_lines(inputs),
        related=ranked,
        confidence=0.0,
        data={"nearest": ranked},
    )
