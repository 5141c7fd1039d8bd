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

from .. import catalog
from ..catalog.errors import ERROR_FAMILIES
from ..catalog.family_codes import SCALAR_TYPE_MISMATCH, UNKNOWN
from ..catalog.model import Family
from ..catalog.symptoms import CHECK_COMMAND, DTYPE_EVIDENCE, SETUP_FAMILIES, SYMPTOMS, Symptom
from ..report import Evidence, Finding, Fix
from .normalize import view

GENERIC = SCALAR_TYPE_MISMATCH
HEAD = 16 * 1024  # bytes of each input's start and end that are read (a description is short)
TAIL = 48 * 1024
_ERROR_LINE = re.compile(r"\b\w{0,60}(?:Error|Exception|Warning)\b:?[^\n]{0,300}")


@lru_cache(maxsize=1)
def _keyword_rx() -> re.Pattern[str]:
    words = sorted({k for fam in catalog.FAMILIES for k in fam.keywords}, key=len, reverse=True)
    return re.compile(r"(?<![a-z0-9_])(" + "|".join(map(re.escape, words)) + r")(?![a-z0-9_])")


@lru_cache(maxsize=1)
def _symptom_rx() -> tuple[tuple[Symptom, re.Pattern[str]], ...]:
    return tuple((s, re.compile(s.regex)) for s in SYMPTOMS)


def _chunks(text: str) -> list[tuple[str, int]]:
    """The parts of a text that are read, each with the number of its first line."""
    if len(text) <= HEAD + TAIL:
        return [(text, 1)]
    return [(text[:HEAD], 1), (text[-TAIL:], text.count("\n", 0, len(text) - TAIL) + 1)]


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


def fallback(inputs: list[tuple[str | None, str]]) -> Finding:
    """The finding for inputs in which no message pattern matched."""
    samples = [(source, _chunks(text)) for source, text in inputs]
    low = view("\n".join(chunk for _, chunks in samples for chunk, _ in chunks)).lower()
    words = set(_keyword_rx().findall(low))
    ranked = nearest(words)
    for symptom, rx in _symptom_rx():
        m = rx.search(low)
        if m:
            said = m.group(0).strip()
            return _symptom(symptom.code, symptom.confirm, symptom.confidence, said, samples, inputs, ranked)
    evidence = re.search(DTYPE_EVIDENCE, low)
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
    inputs: list[tuple[str | None, str]],
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
    finding.fixes.insert(0, Fix(title="Confirm it: run the code under dtype-doctor", snippet=confirm))
    return finding


def _last_lines(samples: list[tuple[str | None, str]]) -> list[Evidence]:
    evidence: list[Evidence] = []
    for source, text in samples:
        tail = text[-16 * 1024 :]
        base = text.count("\n", 0, len(text) - len(tail)) + 1
        numbered = [(base + i, ln.strip()) for i, ln in enumerate(tail.split("\n")) if ln.strip()]
        picked = [(n, ln) for n, ln in numbered if _ERROR_LINE.search(ln)][-3:] or numbered[-1:]
        evidence.extend(Evidence(text=ln[:500], line=n, source=source) for n, ln in picked)
    return evidence


def _unknown(inputs: list[tuple[str | None, str]], ranked: list[str]) -> Finding:
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
