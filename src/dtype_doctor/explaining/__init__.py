"""Error text, traceback or whole log → findings, through the catalog. Never imports torch.

Stages: `decode` (bytes, UTF-16/BOM logs) → `normalize` (one clean spelling of every line and
dtype) → `core` (one-pass scan for message patterns, tracebacks, context refinements) →
`fallback` (symptoms in words, nearest family when there is dtype evidence, else `unknown`).
"""

from __future__ import annotations

from .core import explain, explain_sources
from .family import family_of

__all__ = ["explain", "explain_sources", "family_of"]
