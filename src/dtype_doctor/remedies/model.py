"""The shape of a remedy: what the catalog writes down once for every finding it fits."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FixTemplate:
    """A remedy. Text may use {module}, {param}, {input}, {dtype}, {other_dtype}, {file}, {line}...

    `when`/`unless` are context tags (a family's fixes: which apply in which context); `needs` names
    the evidence without which the remedy does not apply at all (the processor gives no fix then);
    `build` names an edit builder of `remedies.builders` that writes the snippet from the evidence
    (for edits a format string cannot say: one line per path, a loop); `language` is `python` or
    `shell` (empty: read off the snippet); `place` is the kind of the user's line it is pasted at
    (`remedies.places`: input, call, model, birth, loss, op; empty: read off the names the snippet
    reads).
    """

    title: str
    snippet: str = ""
    why: str = ""
    when: frozenset[str] = frozenset()  # applies only in these contexts (empty: always)
    unless: frozenset[str] = frozenset()  # never in these contexts
    needs: tuple[str, ...] = ()  # evidence names that must be known (non-empty)
    build: str = ""  # an edit builder's name in remedies.builders (empty: `snippet` formatted)
    language: str = ""
    place: str = ""
