"""The one data model: every producer emits Findings, every renderer reads a Report.

Plain dataclasses with a JSON round trip. No torch import: `explain` and the
renderers must stay light.
"""

from __future__ import annotations

import functools
import json
import operator
import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from typing import Any, TypeVar

from .sections import section_from_dict, section_to_dict, sections_from_meta

_SectionT = TypeVar("_SectionT")
SCHEMA_VERSION = 2  # 2: typed `sections` (schema 1 kept them in meta; still read)
READABLE_SCHEMAS = (1, 2)


def json_schema() -> dict[str, Any]:
    """The published JSON Schema of the report this version writes (package data:
    schema/report.schema.json, whose `schema_version` is `SCHEMA_VERSION`)."""
    from importlib.resources import files

    return json.loads(
        files(__package__).joinpath("schema").joinpath("report.schema.json").read_text(encoding="utf-8")
    )


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    def __str__(self) -> str:
        return self.value


@dataclass
class Origin:
    """Where a tensor got its dtype.

    kind: parameter | buffer | input | op | promotion | cast | value (a Python number) | array (a NumPy
    array a tensor was converted from) | unknown
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
        elif self.kind == "output":
            text = f"output of {self.op or '?'}" + (f" ('{self.name}')" if self.name else "")
            text += f" called at {self.file}:{self.line}" if self.file else ""
            return text
        elif self.kind in ("op", "cast", "promotion", "autocast"):
            text = f"{self.kind} {self.op or '?'}"
        elif self.kind == "array":  # the NumPy array a tensor was converted from
            text = f"NumPy array {self.name or '?'}"
        elif self.kind == "value":  # a dtype or a number chosen in the source, not a tensor
            text = f"value {self.name or '?'}"
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
    shape: list[int | str] | None = None  # a symbolic size (a jagged tensor's ragged one) by name: "j0"
    name: str | None = None
    origin: Origin | None = None

    def __post_init__(self) -> None:
        if self.shape is not None:
            self.shape = [_size(n) for n in self.shape]


def _size(n: Any) -> int | str:
    """A dimension's size as JSON holds it: an int, or the name of a symbolic size (`j0`)."""
    if type(n) in (int, str):
        return n
    try:
        return operator.index(n)  # a NumPy integer, a SymInt with a known value
    except Exception:  # a symbolic size has no value: its name
        return str(n)


_SHELL_START = ("pip ", "pip3 ", "conda ", "dtype-doctor ", "torchrun ", "python ", "export ", "apt", "git ")


_ENV_PREFIX = re.compile(r"^[A-Z_][A-Z0-9_]*=\S*\s")  # DTYPE_DOCTOR_DEBUG=1 dtype-doctor run ...


def snippet_language(snippet: str) -> str:
    """`shell` when the snippet's first line is a command line, else `python` (for old reports)."""
    first = next((ln.strip() for ln in snippet.splitlines() if ln.strip()), "")
    if first.startswith(_SHELL_START) or first.startswith("$ ") or _ENV_PREFIX.match(first):
        return "shell"
    return "python"


@dataclass
class Fix:
    """One remedy, ranked by its position in Finding.fixes (best first).

    language: `python` (the snippet parses as Python) or `shell` (a command line).
    verified: True when the tool replayed the failing call with this fix applied and it passed,
    False when that replay still failed, None when it was not tried. verification: what the replay
    found, as shown (`verified: passes, max rel. error 2e-03 vs fp32`, `fails: ...`, `not verified (why)`).
    file, line: the place the snippet is pasted at (or replaces), where the remedy knows one.
    edits: the fix as edits of the user's files, in ruff's JSON shape (editing/fix_edits.py): what
    the console shows as a diff, `--diff` prints, `--write` applies and SARIF carries. A fix without
    edits is advice (a command, a setting): it never ranks ahead of one with edits.
    """

    title: str
    snippet: str = ""
    why: str = ""
    language: str = ""
    verified: bool | None = None
    verification: str = ""
    file: str | None = None
    line: int | None = None
    edits: list[dict[str, Any]] = field(default_factory=list)
    diff: str = ""  # the edits as a short unified diff of the user's lines, made with them

    def __post_init__(self) -> None:
        if not self.language:
            self.language = snippet_language(self.snippet)

    def headline(self) -> str:
        """The title with where the snippet is pasted (`at FILE:LINE`), unless the title says it."""
        if not self.file or self.line is None or f"{self.file}:{self.line}" in self.title:
            return self.title
        return f"{self.title} (at {self.file}:{self.line})"


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
    # the root origin this finding shares with others (causes.group_by_cause); None: a cause of its own
    root_cause: str | None = None

    def key(self) -> tuple:
        """The one identity of a finding: Report.add, the processors and merge fold by it."""
        loc = self.location
        return (
            self.code,
            loc.module if loc else None,
            loc.op if loc else None,
            tuple((o.role, o.dtype) for o in self.operands),
            self.message,
        )


# kind ("text", "rich", "html") -> function(report): filled by dtype_doctor/__init__.py
DISPLAY: dict[str, Callable[[Report], Any]] = {}


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)
    tool: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION
    sections: list[Any] = field(default_factory=list)  # sections.Table, Plot, DtypeMap, EnvFacts, ...
    # when the program the report is of started (time.time_ns(), never serialized): a file written
    # since is not the one that ran, and no edit is made against it (patching.plan.Planner)
    started_ns: int | None = field(default=None, compare=False, repr=False)

    def add(self, finding: Finding) -> Finding:
        """Add a finding, folding it into an identical earlier one (count += 1). O(1): by Finding.key."""
        key = finding.key()
        index = self._index()
        existing = index.get(key)
        if existing is not None and existing.key() == key:
            existing.count += finding.count
            return existing
        self.findings.append(finding)
        index[key] = finding
        self._indexed = (self.findings, len(self.findings))
        return finding

    def _index(self) -> dict[tuple, Finding]:
        """Findings by key, rebuilt when the list was replaced or edited behind add()'s back."""
        indexed = getattr(self, "_indexed", None)
        index = getattr(self, "_by_key", None)
        if (
            index is None
            or indexed is None
            or indexed[0] is not self.findings
            or indexed[1] > len(self.findings)
        ):
            index = {}
            start = 0
        else:
            start = indexed[1]
        for f in self.findings[start:]:
            index.setdefault(f.key(), f)
        self._by_key = index
        self._indexed = (self.findings, len(self.findings))
        return index

    def extend(self, findings: Iterable[Finding]) -> None:
        for f in findings:
            self.add(f)

    def section(self, cls: type[_SectionT]) -> _SectionT | None:
        """The first section of this type, or None."""
        return next((s for s in self.sections if isinstance(s, cls)), None)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == Severity.ERROR]

    def codes(self) -> list[str]:
        return [f.code for f in self.findings]

    def __bool__(self) -> bool:  # a Report is always truthy; use .findings to test emptiness
        return True

    # How a Report shows itself (Jupyter, print, rich): looked up in DISPLAY, which the package's
    # __init__ fills with the renderers (render/display.py); report.py never imports a renderer.
    def _repr_html_(self) -> str:
        return DISPLAY["html"](self)

    def __str__(self) -> str:
        """The console report as plain text: `print(session.report)`."""
        return DISPLAY["text"](self)

    def __rich__(self) -> Any:
        return DISPLAY["rich"](self)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "tool": self.tool,
            "meta": self.meta,
            "findings": [_finding_to_dict(f) for f in self.findings],
            "sections": [section_to_dict(x) for x in self.sections],
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, default=str)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        _check_shape(data)
        version = data.get("schema_version")
        if version not in READABLE_SCHEMAS or isinstance(version, bool):
            raise ValueError(
                f"unsupported report schema_version {version!r} (this tool reads {READABLE_SCHEMAS})"
            )
        meta = dict(data.get("meta", {}))
        sections = sections_from_meta(meta) if version == 1 else []
        raw_sections = data.get("sections", [])
        if not isinstance(raw_sections, list):
            raise ValueError("'sections' is not a list")
        sections += [section_from_dict(x) for x in raw_sections]
        findings = [_finding_from_dict(f) for f in data.get("findings", [])]
        if version == 1:
            from .dtype_map import lift_finding_maps

            sections += lift_finding_maps(findings)
        return cls(findings=findings, tool=data.get("tool", ""), meta=meta, sections=sections)

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
    names = _field_names(cls)
    return {k: v for k, v in d.items() if k in names}


@functools.cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


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


_S, _I, _N = (str,), (int,), (int, float)
_OPT_S, _OPT_I = (str, type(None)), (int, type(None))
_FIELD_TYPES: dict[str, dict[str, tuple[type, ...]]] = {
    "finding": {"severity": _S, "cause": _S, "message": _S, "count": _I, "confidence": _N,
                "related": (list,), "data": (dict,)},
    "location": {"module": _OPT_S, "module_type": _OPT_S, "op": _OPT_S, "file": _OPT_S,
                 "function": _OPT_S, "line": _OPT_I, "rank": _OPT_I, "step": _OPT_I},
    "operand": {"role": _S, "dtype": _OPT_S, "name": _OPT_S, "shape": (list, type(None)),
                "origin": (dict, type(None))},
    "origin": {"kind": _S, "name": _OPT_S, "op": _OPT_S, "module": _OPT_S, "file": _OPT_S,
               "dtype": _OPT_S, "line": _OPT_I, "chain": (list,)},
    "fixes": {"title": _S, "snippet": _S, "why": _S, "verified": (bool, type(None)), "verification": _S,
              "edits": (list,), "diff": _S},
    "evidence": {"text": _S, "line": _OPT_I, "source": _OPT_S},
}  # fmt: skip
_SEVERITIES = frozenset(s.value for s in Severity)
MAX_DEPTH = 64  # nesting a report's free-form dicts may have; deeper input is refused, not recursed into


def _check_fields(obj: Any, kind: str, where: str) -> None:
    if not isinstance(obj, dict):
        raise ValueError(f"{where} is not an object")
    for name, types in _FIELD_TYPES[kind].items():
        if name not in obj:
            continue
        value = obj[name]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise ValueError(f"{where}.{name} has the wrong type ({type(value).__name__})")


def _check_depth(value: Any, where: str) -> None:
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ValueError(f"{where} is nested deeper than {MAX_DEPTH} levels")
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        stack.extend((c, depth + 1) for c in children)


def _check_origin(origin: Any, where: str, depth: int = 0) -> None:
    if depth > MAX_DEPTH:
        raise ValueError(f"{where} is nested deeper than {MAX_DEPTH} levels")
    _check_fields(origin, "origin", where)
    for i, link in enumerate(origin.get("chain", [])):
        _check_origin(link, f"{where}.chain[{i}]", depth + 1)


def _check_finding(f: Any, where: str) -> None:
    _check_fields(f, "finding", where)
    for key in ("code", "title"):
        if not isinstance(f.get(key), str):
            raise ValueError(f"{where}.{key} is missing or not a string")
    if f.get("severity", "error") not in _SEVERITIES:
        raise ValueError(f"{where}.severity is not one of error, warning, info")
    for key in ("operands", "fixes", "evidence"):
        items = f.get(key, [])
        if not isinstance(items, list):
            raise ValueError(f"{where}.{key} is not a list")
        for j, item in enumerate(items):
            _check_fields(item, "operand" if key == "operands" else key, f"{where}.{key}[{j}]")
    for j, op in enumerate(f.get("operands", [])):
        if op.get("origin") is not None:
            _check_origin(op["origin"], f"{where}.operands[{j}].origin")
        if op.get("shape") is not None and not all(
            isinstance(n, (int, str)) and not isinstance(n, bool) for n in op["shape"]
        ):
            raise ValueError(f"{where}.operands[{j}].shape is not a list of sizes (integers, or names)")
    if f.get("location") is not None:
        _check_fields(f["location"], "location", f"{where}.location")
    _check_depth(f.get("data", {}), f"{where}.data")


def _check_shape(data: Any) -> None:
    """Name the first field that is not what a report has (ValueError), before building dataclasses."""
    if not isinstance(data, dict):
        raise ValueError(f"a report is a JSON object, got {type(data).__name__}")
    if not isinstance(data.get("meta", {}), dict):
        raise ValueError("'meta' is not an object")
    _check_depth(data.get("meta", {}), "meta")
    findings = data.get("findings", [])
    if not isinstance(findings, list):
        raise ValueError("'findings' is not a list")
    for i, f in enumerate(findings):
        _check_finding(f, f"findings[{i}]")
