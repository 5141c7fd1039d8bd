"""Shapes of the catalog's data."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..remedies.model import FixTemplate

__all__ = ["ContextSignal", "Family", "FixTemplate", "MessagePattern", "Refinement"]


@dataclass(frozen=True)
class MessagePattern:
    """A regular expression for one spelling of a family's message.

    Named groups give operands: `(?P<input>...)`, `(?P<weight>...)`, ... each capturing a
    dtype spelling; `roles` maps group names to the role written in the finding when the
    group name itself is not the role (e.g. {"a": "input", "b": "weight"}).

    `needles` are literal substrings of which at least one occurs in every line the regex
    matches: the scanner looks for the needles of all patterns in one pass and runs the
    regex only on the lines that contain one. Regexes must stay linear: no nested
    quantifiers, bounded repeats (`.{0,80}`) instead of `.*` between two parts.
    `info` names groups that are not operand dtypes (a kernel name, a value...).
    `roles_if` gives other roles when a context tag is present (e.g. `mm` vs `F.linear`).
    `tags` are context tags the spelling itself is evidence of, for refinements.
    """

    regex: str
    roles: tuple[tuple[str, str], ...] = ()
    note: str = ""  # which op / path produces this spelling
    needles: tuple[str, ...] = ()
    info: tuple[str, ...] = ()
    roles_if: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
    ignorecase: bool = True  # patterns run over normalize.view(line); most messages come in any case
    confidence: float = 0.9  # how surely this text means this family, with no other context
    tags: tuple[str, ...] = ()  # context tags this spelling itself sets (e.g. which component words it so)


@dataclass(frozen=True)
class Family:
    code: str
    title: str
    cause: str
    patterns: tuple[MessagePattern, ...] = ()
    fixes: tuple[FixTemplate, ...] = ()
    severity: str = "error"
    related: tuple[str, ...] = ()
    keywords: tuple[str, ...] = field(default=())  # words that suggest this family for an `unknown`


@dataclass(frozen=True)
class ContextSignal:
    """Text near an error (its traceback frames, quoted code) that sets a context tag.

    `needles` are literal substrings (any one is enough); `scope` is "local" (the error's
    own traceback) or "log" (anywhere in the input: facts about the environment or the run).
    """

    tag: str
    needles: tuple[str, ...]
    scope: str = "local"
    ignorecase: bool = False


@dataclass(frozen=True)
class Refinement:
    """Context decides between families: a generic text in this context is really `to`.

    Applies when the finding's code is in `codes` and all tags of `when` are present (and
    none of `unless`). `roles` renames operand roles (e.g. expected/found → input/weight).
    The first matching refinement in catalog order wins.
    """

    codes: frozenset[str]
    when: frozenset[str]
    to: str
    roles: tuple[tuple[str, str], ...] = ()
    unless: frozenset[str] = frozenset()
    note: str = ""
