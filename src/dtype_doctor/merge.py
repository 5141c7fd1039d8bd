"""Compatibility name: merging per-rank reports is a processor (processors.merge_ranks)."""

from __future__ import annotations

from .processors import merge_ranks as merge_reports
from .processors import report_rank

__all__ = ["merge_reports", "report_rank"]
