"""The knowledge: error families, their causes and their fixes.

Data only, no torch import. Every producer (explain, watch, check, audit, numerics,
env) names a family code; the catalog supplies the plain-words cause and the ranked
fixes, made concrete with the names a producer knows (`module`, `param`, ...) by the
remedy processor (`remedies/`); `shared_remedies.py` holds the remedies producers make at a
cause they found (a tensor's birth, a module island, the caller's inputs).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .. import remedies
from ..remedies.names import Names, module_ref
from ..report import Finding, Fix, Severity
from .families import FAMILIES
from .model import Family, FixTemplate, MessagePattern

__all__ = [
    "FAMILIES",
    "Family",
    "FixTemplate",
    "MessagePattern",
    "codes",
    "family",
    "finding",
    "fixes_for",
    "module_ref",
]

_BY_CODE = {f.code: f for f in FAMILIES}


def codes() -> list[str]:
    return list(_BY_CODE)


def family(code: str) -> Family:
    try:
        return _BY_CODE[code]
    except KeyError:
        raise KeyError(f"unknown family code {code!r}") from None


def fixes_for(code: str, context: Iterable[str] = (), **names: object) -> list[Fix]:
    """Ranked fixes of a family for a context, made by the remedy processor (`remedies.ranked`):
    those whose `when` tags are in `context` first, in catalog order, then the general ones."""
    return remedies.ranked(family(code).fixes, context, **names)


def finding(
    code: str,
    context: Iterable[str] = (),
    names: Mapping[str, object] | None = None,
    **fields: object,
) -> Finding:
    """A Finding for `code` with the catalog's title, cause, severity and ranked fixes.

    `fields` override or add Finding attributes (location, operands, evidence, message...).
    """
    fam = family(code)
    names = dict(names or {})
    base: dict[str, object] = {
        "code": code,
        "title": fam.title,
        "severity": Severity(fam.severity),
        "cause": fam.cause.format_map(Names.known(names)),
        "fixes": fixes_for(code, context, **names),
        "related": list(fam.related),
    }
    base.update(fields)
    return Finding(**base)  # type: ignore[arg-type]
