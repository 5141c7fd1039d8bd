"""SARIF 2.1.0, the format code-scanning services read (GitHub code scanning, IDE viewers).

One run of the `dtype-doctor` tool: a rule per family code in the report (from the catalog: its
title, cause and ranked fixes, in general words: no `{placeholder}` of a template), a result per
finding (level from severity, message, the finding's file:line and its operands' origins as
locations), and, where the report holds a source edit (`run --diff`), that edit as the result's
SARIF `fixes`. Every file is a path relative to the repository's top level (`%SRCROOT%`, the git
work tree of the user's files, else the working folder), as code scanning reads them; a file of an
installed library (nor a file that is not there) is never one: the result points at the user's frame
that reached it, else at the user's other places it carries (operands' origins), else, for check and
audit, at the factory the model was built with, else at no file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from .. import catalog
from ..editing.fix_edits import by_file
from ..report import Finding, Report, Severity
from .base import PresentedRenderer
from .fsnames import shown_all, uri_path
from .places import Place, entry_point, in_repository, repository_path, source_root
from .registry import RenderOptions

SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
_ROOT = "%SRCROOT%"


class SarifRenderer(PresentedRenderer, name="sarif", extension=".sarif"):
    def render(self, report: Report, options: RenderOptions) -> str:
        return json.dumps(shown_all(sarif_log(report, options.base)), indent=2) + "\n"


def sarif_log(report: Report, base: str | None = None) -> dict[str, Any]:
    from .. import __version__

    root = source_root(report, base)
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
        "originalUriBaseIds": {_ROOT: {"uri": Path(root).as_uri().rstrip("/") + "/"}},
        "results": [_result(f, codes.index(f.code), root, entry_point(report)) for f in report.findings],
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
    title, cause = general(family.title), general(family.cause)
    fixes = "\n".join(f"{i}. {general(fix.title)}" for i, fix in enumerate(catalog.fixes_for(code), 1))
    help_text = (cause or title) + (f"\n\nFixes, best first:\n{fixes}" if fixes else "")
    return {
        "id": code,
        "name": "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", code) if part),
        "shortDescription": {"text": title},
        "fullDescription": {"text": cause or title},
        "help": {"text": help_text},
        "defaultConfiguration": {"level": _LEVEL.get(Severity(family.severity), "warning")},
    }


# what a rule says where a finding's text names the thing: a placeholder's general words ("" drops it)
GENERAL = {
    "op": "an op",
    "dtype": "one dtype",
    "other_dtype": "another dtype",
    "dtype_name": "one dtype",
    "module": "a module",
    "modules": "the modules",
    "leaf": "a module",
    "where": "a module",
    "module_class": "the module's class",
    "component": "a component",
    "input": "an input",
    "tensor": "a tensor",
    "dest": "the destination",
    "array": "an array",
    "param": "a parameter",
    "model": "the model",
    "model_class": "the model's class",
    "optimizer": "the optimizer",
    "optimizer_class": "the optimizer's",
    "scaler": "the scaler",
    "receiver": "the accumulator",
    "value": "the value",
    "number": "the number",
    "limit": "the limit",
    "operands": "the operands",
    "variant": "a lower precision",
    "source": "configuration",
    "package": "an extension",
    "requirement": "a torch version",
    "torch": "of another version",
    "gpu": "this GPU",
    "missing": "the instructions for them",
    "device": "the device",
    "made_op": "a factory function",
}
_FIELD = r"\{(?P<name>[A-Za-z_]\w*)(?:![rsa])?(?::[^{}]*)?\}"
_ANY = _FIELD.replace("?P<name>", "?:")
_QUOTED = re.compile(rf"(?P<q>[`'\"]){_FIELD}(?P=q)")
_ASIDE = re.compile(rf"[ \t]*\((?:[^(){{}}]|{_ANY})*{_ANY}[^(){{}}]*\)")  # "({dtype} and {other_dtype})"
_START = r"(^|[.!?][ \t]+)"  # a sentence starts after it
# stand-ins while the text is tidied: a literal `{{`/`}}`, and around the words put for a placeholder
_OPEN, _CLOSE, _IN, _OUT = "\x04", "\x05", "\x02", "\x03"


def general(text: str) -> str:
    """A catalog template as a rule says it, for no finding in particular: each `{placeholder}` in
    its general words (`GENERAL`: `{op}` → "an op", `{dtype}` → "one dtype"; quotes around a lone
    name go with it; in code, `{scaler}.unscale_()` → `scaler.unscale_()`), an aside made of
    placeholders dropped whole (`({dtype} and {other_dtype})`), a placeholder with no general words
    dropped with its space; `{{` and `}}` are the braces they write."""

    def words(m: re.Match[str]) -> str:
        return _IN + GENERAL.get(m.group("name"), "") + _OUT

    def little(m: re.Match[str]) -> str:  # an aside of at most one word besides its placeholders
        return "" if len(re.findall(r"[A-Za-z]{3,}", re.sub(_ANY, "", m.group(0)))) <= 1 else m.group(0)

    def code(m: re.Match[str]) -> str:  # a code span: a lone name in words, else each name as itself
        return (
            m.group(0)
            if not re.search(_FIELD, m.group(0))
            else re.sub(_FIELD, lambda f: f["name"], m.group(0))
        )

    braces = {"{{": _OPEN, "}}": _CLOSE}
    text = re.sub(r"\{\{|\}\}|\{[^{}]*\}", lambda m: braces.get(m.group(0), m.group(0)), text)
    text = re.sub(r"`[^`\n]*`", code, _QUOTED.sub(words, text))
    text = re.sub(_FIELD, words, _ASIDE.sub(little, text))
    upper = lambda m: m.group(1) + m.group(2).upper()  # noqa: E731
    text = re.sub(rf"{_START}{_IN}{_OUT}[ \t]*([a-z])", upper, text)  # "{forks} process(es)"
    text = re.sub(rf"[ \t]*{_IN}{_OUT}(?=[,.;:!?)]|$)|{_IN}{_OUT}[ \t]*", "", text)
    text = re.sub(rf"{_START}{_IN}([a-z])", upper, text)  # "{op} received" → "An op received"
    for stand_in, char in ((_IN, ""), (_OUT, ""), (_OPEN, "{"), (_CLOSE, "}")):
        text = text.replace(stand_in, char)
    return text.strip()


def _artifact(rel: str) -> dict[str, Any]:
    return {"uri": uri_path(rel), "uriBaseId": _ROOT}


def _location(place: Place) -> dict[str, Any]:
    """A place in the repository (`in_repository`: its file relative to the root) as a location."""
    physical: dict[str, Any] = {"artifactLocation": _artifact(place.file)}
    if place.line is not None:
        physical["region"] = {"startLine": place.line}
    return {"physicalLocation": physical, "message": {"text": place.what}}


def _result(f: Finding, rule_index: int, root: str, entry: Place | None = None) -> dict[str, Any]:
    text = f.message or f.title
    if f.fixes:
        text += f"\nFix: {f.fixes[0].headline()}"
    result: dict[str, Any] = {
        "ruleId": f.code,
        "ruleIndex": rule_index,
        "level": _LEVEL.get(f.severity, "warning"),
        "message": {"text": text},
    }
    located = [_location(p) for p in in_repository(f, root, entry)]
    if located:
        result["locations"] = located[:1]
        if located[1:]:
            result["relatedLocations"] = [{"id": i, **loc} for i, loc in enumerate(located[1:], 1)]
    if f.location is not None and f.location.module is not None:
        logical = {"fullyQualifiedName": f.location.module or "<root>", "kind": "module"}
        result.setdefault("locations", [{}])[0]["logicalLocations"] = [logical]
    fixes = _fixes(f, root)
    if fixes:
        result["fixes"] = fixes
    result["properties"] = {"count": f.count, "confidence": f.confidence}
    return result


def _fixes(f: Finding, root: str) -> list[dict[str, Any]]:
    """The finding's first fix with edits as a SARIF fix: one artifactChange per file of the
    repository, each edit a replacement of its region (columns 1-based, the end exclusive, as in the
    fix's own edits)."""
    fix = next((x for x in f.fixes if x.edits), None)
    if fix is None:
        return []
    changes = []
    for path, edits in by_file(fix.edits).items():
        rel = repository_path(path, root)
        if rel is None:
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
        changes.append({"artifactLocation": _artifact(rel), "replacements": replacements})
    return [{"description": {"text": fix.title}, "artifactChanges": changes}] if changes else []
