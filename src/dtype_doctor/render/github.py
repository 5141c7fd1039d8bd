"""GitHub Actions workflow commands: one `::error file=...,line=...,title=...::message` per
finding, which the runner shows as an annotation on that line of the pull request. The file is the
finding's first place in the repository (relative to its top level, as SARIF's): never a file of an
installed library, whose line is in no pull request; the user's frame that reached it instead (or
the check's factory, `places.in_repository`), else no file (the annotation goes on the run's summary)."""

from __future__ import annotations

from ..report import Finding, Report, Severity
from .base import PresentedRenderer
from .fsnames import shown
from .places import Place, entry_point, in_repository, source_root
from .registry import RenderOptions

_COMMAND = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def _data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(finding: Finding, root: str | None = None, entry: Place | None = None) -> str:
    """The finding's workflow command; `root`: the repository's top level (default: `source_root`),
    `entry`: the factory a check/audit started from (`places.entry_point`)."""
    props: list[str] = []
    where = next(iter(in_repository(finding, root or source_root(), entry)), None)
    if where is not None:
        props.append(f"file={_property(where.file)}")
        if where.line is not None:
            props.append(f"line={where.line}")
    props.append(f"title={_property(f'dtype-doctor {finding.code}: {finding.title}')}")
    message = finding.message or finding.title
    if finding.fixes:
        message += f"\nfix: {finding.fixes[0].headline()}"
    return f"::{_COMMAND.get(finding.severity, 'warning')} {','.join(props)}::{_data(message)}"


class GithubRenderer(PresentedRenderer, name="github", extension=".github.txt"):
    def render(self, report: Report, options: RenderOptions) -> str:
        root, entry = source_root(report, options.base), entry_point(report)
        return shown("".join(annotation(f, root, entry) + "\n" for f in report.findings))
