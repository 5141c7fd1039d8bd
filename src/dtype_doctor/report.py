"""The one data model: every producer emits Findings, every renderer reads a Report.

Plain dataclasses with a JSON round trip. No torch import: `explain` and the
renderers must stay light.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from typing import Any

SCHEMA_VERSION = 1


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    def __str__(self) -> str:
        return self.value


@dataclass
class Origin:
    """Where a tensor got its dtype.

    kind: parameter | buffer | input | op | promotion | cast | unknown
    `chain` holds the origins of the tensors this one was made from, outermost first.
    """

    kind: str
    name: str | None = None
    op: str | None = None
    module: str | None = None
    file: str | None = None
    line: int | None = None
    dtype: str | None = None
    chain: list[Origin] = field(default_factory=list)

    def describe(self) -> str:
        if self.kind == "parameter":
            text = f"parameter '{self.name}'"
        elif self.kind == "buffer":
            text = f"buffer '{self.name}'"
        elif self.kind == "input":
            text = f"model input '{self.name}'"
        elif self.kind in ("op", "cast", "promotion", "autocast"):
            text = f"{self.kind} {self.op or '?'}"
        else:
            text = self.name or self.kind
        if self.module:
            text += f" in module '{self.module}'"
        if self.file:
            text += f" at {self.file}:{self.line}" if self.line is not None else f" ({self.file})"
        return text


@dataclass
class Operand:
    """One tensor taking part in the failing op. role: input, weight, bias, query, key, mask, ..."""

    role: str
    dtype: str | None = None
    shape: list[int] | None = None
    name: str | None = None
    origin: Origin | None = None


@dataclass
class Fix:
    """One remedy, ranked by its position in Finding.fixes (best first)."""

    title: str
    snippet: str = ""
    why: str = ""


@dataclass
class Evidence:
    """What the finding rests on: a matched log line, a frame, a measured value."""

    text: str
    line: int | None = None
    source: str | None = None


@dataclass
class Location:
    module: str | None = None
    module_type: str | None = None
    op: str | None = None
    file: str | None = None
    line: int | None = None
    function: str | None = None
    rank: int | None = None
    step: int | None = None

    def describe(self) -> str:
        parts = []
        if self.op:
            parts.append(self.op)
        if self.module is not None:
            mod = self.module or "<root>"
            parts.append(f"in '{mod}'" + (f" ({self.module_type})" if self.module_type else ""))
        if self.file:
            parts.append(f"at {self.file}:{self.line}")
        if self.rank is not None:
            parts.append(f"[rank{self.rank}]")
        return " ".join(parts)


@dataclass
class Finding:
    code: str
    title: str
    severity: Severity = Severity.ERROR
    cause: str = ""
    message: str = ""
    location: Location | None = None
    operands: list[Operand] = field(default_factory=list)
    fixes: list[Fix] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)
    count: int = 1
    confidence: float = 1.0
    related: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    def key(self) -> tuple:
        """Identity used to fold duplicates."""
        loc = self.location
        return (
            self.code,
            loc.module if loc else None,
            loc.op if loc else None,
            tuple((o.role, o.dtype) for o in self.operands),
            self.message,
        )


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)
    tool: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    def add(self, finding: Finding) -> Finding:
        """Add a finding, folding it into an identical earlier one (count += 1)."""
        key = finding.key()
        for existing in self.findings:
            if existing.key() == key:
                existing.count += finding.count
                return existing
        self.findings.append(finding)
        return finding

    def extend(self, findings: Iterable[Finding]) -> None:
        for f in findings:
            self.add(f)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == Severity.ERROR]

    def codes(self) -> list[str]:
        return [f.code for f in self.findings]

    def __bool__(self) -> bool:  # a Report is always truthy; use .findings to test emptiness
        return True

    def _repr_html_(self) -> str:
        """Jupyter shows a Report as the HTML report's body."""
        from .render.html import fragment, style

        return style() + fragment(self)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "tool": self.tool,
            "meta": self.meta,
            "findings": [_finding_to_dict(f) for f in self.findings],
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, default=str)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        _check_shape(data)
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ValueError(
                f"unsupported report schema_version {version!r} (this tool reads {SCHEMA_VERSION})"
            )
        return cls(
            findings=[_finding_from_dict(f) for f in data.get("findings", [])],
            tool=data.get("tool", ""),
            meta=data.get("meta", {}),
            schema_version=version,
        )

    @classmethod
    def from_json(cls, text: str) -> Report:
        return cls.from_dict(json.loads(text))


def _finding_to_dict(f: Finding) -> dict[str, Any]:
    d = asdict(f)
    d["severity"] = f.severity.value
    return d


def _origin_from_dict(d: dict[str, Any] | None) -> Origin | None:
    if d is None:
        return None
    d = dict(d)
    d["chain"] = [_origin_from_dict(c) for c in d.get("chain", [])]
    return Origin(**_known(Origin, d))


def _known(cls: type, d: dict[str, Any]) -> dict[str, Any]:
    """Drop keys a newer writer may have added, so old readers keep working."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in d.items() if k in names}


def _finding_from_dict(d: dict[str, Any]) -> Finding:
    d = dict(d)
    loc = d.get("location")
    return Finding(
        **{
            **_known(Finding, d),
            "severity": Severity(d.get("severity", "error")),
            "location": Location(**_known(Location, loc)) if loc else None,
            "operands": [
                Operand(**{**_known(Operand, o), "origin": _origin_from_dict(o.get("origin"))})
                for o in d.get("operands", [])
            ],
            "fixes": [Fix(**_known(Fix, x)) for x in d.get("fixes", [])],
            "evidence": [Evidence(**_known(Evidence, e)) for e in d.get("evidence", [])],
        }
    )


def _check_shape(data: Any) -> None:
    """Name the first field that is not what a report has (ValueError), before building dataclasses."""
    if not isinstance(data, dict):
        raise ValueError(f"a report is a JSON object, got {type(data).__name__}")
    if not isinstance(data.get("meta", {}), dict):
        raise ValueError("'meta' is not an object")
    findings = data.get("findings", [])
    if not isinstance(findings, list):
        raise ValueError("'findings' is not a list")
    for i, f in enumerate(findings):
        if not isinstance(f, dict):
            raise ValueError(f"findings[{i}] is not an object")
        for key in ("code", "title"):
            if not isinstance(f.get(key), str):
                raise ValueError(f"findings[{i}].{key} is missing or not a string")
        for key in ("operands", "fixes", "evidence"):
            items = f.get(key, [])
            if not isinstance(items, list) or not all(isinstance(x, dict) for x in items):
                raise ValueError(f"findings[{i}].{key} is not a list of objects")
        if f.get("location") is not None and not isinstance(f["location"], dict):
            raise ValueError(f"findings[{i}].location is not an object")
