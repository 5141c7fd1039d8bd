"""The one message-to-family reader for producers that hold only an error message (watch, when an op
with no contract raises): explain's rules over the text, the first family they name."""

from __future__ import annotations

from ..catalog.family_codes import UNKNOWN
from .core import explain


def family_of(text: str) -> str | None:
    """The family an error message belongs to, read by explain's rules; None when it names none."""
    codes = [f.code for f in explain(text).findings if f.code != UNKNOWN]
    return codes[0] if codes else None
