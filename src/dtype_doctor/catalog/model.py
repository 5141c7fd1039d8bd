"""Shapes of the catalog's data."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class FixTemplate:
    """A remedy. Text may use {module}, {param}, {input}, {dtype}, {other_dtype}, {file}, {line}..."""

    title: str
    snippet: str = ""
    why: str = ""
    when: frozenset[str] = frozenset()  # applies only in these contexts (empty: always)
    unless: frozenset[str] = frozenset()  # never in these contexts


@dataclass(frozen=True)
class MessagePattern:
    """A regular expression for one spelling of a family's message.

    Named groups give operands: `(?P<input>...)`, `(?P<weight>...)`, ... each capturing a
    dtype spelling; `roles` maps group names to the role written in the finding when the
    group name itself is not the role (e.g. {"a": "input", "b": "weight"}).
    """

    regex: str
    roles: tuple[tuple[str, str], ...] = ()
    note: str = ""  # which op / path produces this spelling


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
