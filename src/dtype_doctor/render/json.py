"""The JSON renderer: a Report as schema-2 JSON text (sections by type, via sections.section_to_dict)."""

from __future__ import annotations

from ..causes import group_by_cause
from ..processors import lift_meta_sections
from ..report import Report


def render_json(report: Report) -> str:
    """The report as one JSON document (with a final newline); schema-1 meta sections typed first,
    every finding with its `root_cause`."""
    return group_by_cause(lift_meta_sections(report)).to_json() + "\n"
