"""SARIF 2.1.0, the format code-scanning services read (GitHub code scanning, IDE viewers).

One run of the `dtype-doctor` tool: a rule per family code in the report (from the catalog: its
title, cause and ranked fixes), a result per finding (level from severity, message, the finding's
file:line and its operands' origins as locations, relative to the working folder), and, where the
report holds a source edit (`run --diff`), that edit as the result's SARIF `fixes`.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

from .. import catalog
from ..editing.fix_edits import by_file
from ..report import Finding, Report, Severity
from .base import PresentedRenderer
from .places import Place, places, relative
from .registry import RenderOptions

SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
_ROOT = "SRCROOT"


class SarifRenderer(PresentedRenderer, name="sarif", extension=".sarif"):
    def render(self, report: Report, options: RenderOptions) -> str:
        return json.dumps(sarif_log(report, options.base), indent=2) + "\n"


def sarif_log(report: Report, base: str | None = None) -> dict[str, Any]:
    from .. import __version__

    base = os.path.abspath(base or os.getcwd())
    codes = list(dict.fromkeys(f.code for f in report.findings))
    run: dict[str, Any] = {
        "tool": {
            "driver": {
                "name": "dtype-doctor",
                "version": __version__,
                "informationUri": "https://pypi.org/project/dtype-doctor/",
                "rules": [_rule(code, report) for code in codes],
            }
        },
        "originalUriBaseIds": {_ROOT: {"uri": Path(base).as_uri() + "/"}},
        "results": [_result(f, codes.index(f.code), base) for f in report.findings],
    }
    if report.tool:
        run["automationDetails"] = {"id": f"dtype-doctor/{report.tool}/"}
    return {"$schema": SCHEMA, "version": "2.1.0", "runs": [run]}


def _rule(code: str, report: Report) -> dict[str, Any]:
    try:
        family = catalog.family(code)
    except KeyError:  # a code no catalog of this version knows (an older report): its finding's words
        first = next(f for f in report.findings if f.code == code)
        return {"id": code, "shortDescription": {"text": first.title}}
    fixes = "\n".join(f"{i}. {fix.title}" for i, fix in enumerate(catalog.fixes_for(code), 1))
    help_text = family.cause + (f"\n\nFixes, best first:\n{fixes}" if fixes else "")
    return {
        "id": code,
        "name": "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", code) if part),
        "shortDescription": {"text": family.title},
        "fullDescription": {"text": family.cause or family.title},
        "help": {"text": help_text},
        "defaultConfiguration": {"level": _LEVEL.get(Severity(family.severity), "warning")},
    }


def _artifact(path: str, base: str) -> dict[str, Any] | None:
    rel = relative(path, base)
    if rel is not None:
        return {"uri": quote(rel), "uriBaseId": _ROOT}
    if os.path.isabs(path):
        return {"uri": Path(path).as_uri()}
    return None  # <stdin>, <string>: no file to point at


def _location(place: Place, base: str) -> dict[str, Any] | None:
    artifact = _artifact(place.file, base)
    if artifact is None:
        return None
    physical: dict[str, Any] = {"artifactLocation": artifact}
    if place.line is not None:
        physical["region"] = {"startLine": place.line}
    return {"physicalLocation": physical, "message": {"text": place.what}}


def _result(f: Finding, rule_index: int, base: str) -> dict[str, Any]:
    text = f.message or f.title
    if f.fixes:
        text += f"\nFix: {f.fixes[0].headline()}"
    result: dict[str, Any] = {
        "ruleId": f.code,
        "ruleIndex": rule_index,
        "level": _LEVEL.get(f.severity, "warning"),
        "message": {"text": text},
    }
    located = [loc for p in places(f) if (loc := _location(p, base)) is not None]
    if located:
        result["locations"] = located[:1]
        if located[1:]:
            result["relatedLocations"] = [{"id": i, **loc} for i, loc in enumerate(located[1:], 1)]
    if f.location is not None and f.location.module is not None:
        logical = {"fullyQualifiedName": f.location.module or "<root>", "kind": "module"}
        result.setdefault("locations", [{}])[0]["logicalLocations"] = [logical]
    fixes = _fixes(f, base)
    if fixes:
        result["fixes"] = fixes
    result["properties"] = {"count": f.count, "confidence": f.confidence}
    return result


def _fixes(f: Finding, base: str) -> list[dict[str, Any]]:
    """The finding's first fix with edits as a SARIF fix: one artifactChange per file, each edit a
    replacement of its region (columns 1-based, the end exclusive, as in the fix's own edits)."""
    fix = next((x for x in f.fixes if x.edits), None)
    if fix is None:
        return []
    changes = []
    for path, edits in by_file(fix.edits).items():
        artifact = _artifact(path, base)
        if artifact is None:
            continue
        replacements = [
            {
                "deletedRegion": {
                    "startLine": e["location"]["row"],
                    "startColumn": e["location"]["column"],
                    "endLine": e["end_location"]["row"],
                    "endColumn": e["end_location"]["column"],
                },
                "insertedContent": {"text": e["content"]},
            }
            for e in edits
        ]
        changes.append({"artifactLocation": artifact, "replacements": replacements})
    return [{"description": {"text": fix.title}, "artifactChanges": changes}] if changes else []
