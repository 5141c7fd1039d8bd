"""The JSON renderer: a Report as schema-2 JSON text (sections by type, via sections.section_to_dict)."""

from __future__ import annotations

from typing import Any

from ..processors import present
from ..report import Report


def render_json(report: Report) -> str:
    """The report as one JSON document (with a final newline). Give it a presented report
    (processors.present: schema-1 meta sections typed, every finding with its `root_cause`)."""
    return report.to_json() + "\n"


class JsonRenderer:
    name = "json"
    extension = ".json"
    processors = (present,)
    to_stdout = True

    def render(self, report: Report, options: Any) -> str:
        return render_json(report)
