"""GitHub Actions workflow commands: one `::error file=...,line=...,title=...::message` per
finding, which the runner shows as an annotation on that line of the pull request."""

from __future__ import annotations

from ..report import Finding, Report, Severity
from .base import PresentedRenderer
from .places import places, relative
from .registry import RenderOptions

_COMMAND = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def _data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(finding: Finding, base: str | None = None) -> str:
    props: list[str] = []
    where = next(((rel, p.line) for p in places(finding) if (rel := relative(p.file, base))), None)
    if where is not None:
        props.append(f"file={_property(where[0])}")
        if where[1] is not None:
            props.append(f"line={where[1]}")
    props.append(f"title={_property(f'dtype-doctor {finding.code}: {finding.title}')}")
    message = finding.message or finding.title
    if finding.fixes:
        message += f"\nfix: {finding.fixes[0].headline()}"
    return f"::{_COMMAND.get(finding.severity, 'warning')} {','.join(props)}::{_data(message)}"


class GithubRenderer(PresentedRenderer, name="github", extension=".github.txt"):
    def render(self, report: Report, options: RenderOptions) -> str:
        return "".join(annotation(f, options.base) + "\n" for f in report.findings)
