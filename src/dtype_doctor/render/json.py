"""The JSON renderer: a Report as schema-2 JSON text (sections by type, via sections.section_to_dict)."""

from __future__ import annotations

from typing import Any

from ..report import Report
from .base import PresentedRenderer


def render_json(report: Report) -> str:
    """The report as one JSON document (with a final newline). Give it a presented report
    (processors.present: schema-1 meta sections typed, every finding with its `root_cause`)."""
    return report.to_json() + "\n"


class JsonRenderer(PresentedRenderer, name="json", extension=".json"):
    def render(self, report: Report, options: Any) -> str:
        return render_json(report)
