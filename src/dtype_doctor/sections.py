"""Typed report sections: what a producer shows besides its findings, in one declared shape each.

A Report holds them in `report.sections`; renderers dispatch on the type (render/console.py,
render/html.py, render/json via Report.to_dict). JSON: `{"type": "<tag>", ...fields}`.
No torch import.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar


@dataclass
class Table:
    """A titled table of cells (rendered as text)."""

    TYPE: ClassVar[str] = "table"
    title: str
    columns: list[str] = field(default_factory=list)
    rows: list[list[Any]] = field(default_factory=list)


@dataclass
class Plot:
    """A line or bar chart: `series` maps a name to values (None for a gap) along `x`."""

    TYPE: ClassVar[str] = "plot"
    title: str
    kind: str = "line"
    x: list[Any] = field(default_factory=list)
    series: dict[str, list[float | None]] = field(default_factory=dict)
    xlabel: str = ""
    ylabel: str = ""
    log: bool = False


@dataclass
class ModuleDtypes:
    """One module (or a repeated block, `repeat` > 1) and the dtypes of the tensors it holds.

    `dtypes` maps a dtype to a count (tensors or elements, as the producer counts); `own` names the
    module's own parameters by dtype when they disagree (audit's weight/bias mismatch)."""

    path: str
    type: str = ""
    dtypes: dict[str, int] = field(default_factory=dict)
    repeat: int = 1
    own: dict[str, str] = field(default_factory=dict)


@dataclass
class DtypeMap:
    """The dtype map of a model: one entry per module path (root is "")."""

    TYPE: ClassVar[str] = "dtype_map"
    modules: list[ModuleDtypes] = field(default_factory=list)

    def by_path(self) -> dict[str, ModuleDtypes]:
        return {m.path: m for m in self.modules}


@dataclass
class EnvFacts:
    """Facts about the machine (`dtype-doctor env`)."""

    TYPE: ClassVar[str] = "env"
    software: dict[str, Any] = field(default_factory=dict)
    gpus: list[dict[str, Any]] = field(default_factory=list)
    cpu: dict[str, Any] = field(default_factory=dict)
    autocast: dict[str, Any] = field(default_factory=dict)
    libraries: dict[str, Any] = field(default_factory=dict)


@dataclass
class CompareResult:
    """What `compare` measured: its settings (device, repeats, ...) and one dict per precision variant."""

    TYPE: ClassVar[str] = "compare"
    settings: dict[str, Any] = field(default_factory=dict)
    variants: list[dict[str, Any]] = field(default_factory=list)

    def as_meta(self) -> dict[str, Any]:
        """Settings and variants in one dict (schema 1's `meta["compare"]`; the views read the section
        through render/compare_rows.py)."""
        return {**self.settings, "variants": self.variants}


@dataclass
class SourcePatch:
    """The fix as a patch to the user's own files (`run --diff`): a unified diff (`patch -p0`), one
    change per root cause, and what the re-run of the patched program gave (`verified` None: not run)."""

    TYPE: ClassVar[str] = "source_patch"
    diff: str = ""
    files: list[str] = field(default_factory=list)
    changes: list[dict[str, str]] = field(default_factory=list)  # {"cause": ..., "change": ...}
    verified: bool | None = None
    outcome: str = ""
    written: list[str] = field(default_factory=list)  # files --write changed


Section = Table | Plot | DtypeMap | EnvFacts | CompareResult | SourcePatch
SECTION_TYPES: dict[str, type] = {
    cls.TYPE: cls for cls in (Table, Plot, DtypeMap, EnvFacts, CompareResult, SourcePatch)
}


def section_to_dict(section: Any) -> dict[str, Any]:
    return {"type": section.TYPE, **asdict(section)}


def section_from_dict(data: Any) -> Any:
    """A section from its JSON form; ValueError names what is wrong."""
    if not isinstance(data, dict) or data.get("type") not in SECTION_TYPES:
        raise ValueError(f"a section is an object with a 'type' in {sorted(SECTION_TYPES)}")
    cls = SECTION_TYPES[data["type"]]
    known = {f.name: f for f in fields(cls)}
    values = {k: v for k, v in data.items() if k in known}
    try:
        if cls is DtypeMap:
            values["modules"] = [ModuleDtypes(**m) for m in values.get("modules", [])]
        return cls(**values)
    except TypeError as exc:
        raise ValueError(f"section {data['type']!r}: {exc}") from None


def _legacy_entry(path: str, value: Any) -> ModuleDtypes | None:
    if isinstance(value, str):
        return ModuleDtypes(path, "", {value: 1})
    if not isinstance(value, Mapping):
        return None
    raw = value.get("dtypes")
    if isinstance(raw, Mapping):
        dtypes = {str(k): int(v) if isinstance(v, int | float) else 1 for k, v in raw.items()}
    elif isinstance(raw, list | tuple):
        dtypes = {str(d): 1 for d in raw}
    elif value.get("dtype"):
        dtypes = {str(value["dtype"]): 1}
    else:
        dtypes = {}
    repeat = value.get("repeat", 1)
    own = value.get("own")
    return ModuleDtypes(
        path,
        str(value.get("type", "") or ""),
        dtypes,
        repeat if isinstance(repeat, int) else 1,
        {str(k): str(v) for k, v in own.items()} if isinstance(own, Mapping) else {},
    )


def legacy_map(value: Any) -> DtypeMap:
    """A schema-1 map as a section: `{path: {"type", "dtypes"}}`, `{path: "float16"}` or audit's
    rows `[{"path", "type", "dtypes", "repeat", "own"}]` (root "" or "<root>"); anything else is empty."""
    if isinstance(value, Mapping):
        items: Iterable[tuple[str, Any]] = ((str(k), v) for k, v in value.items())
    elif isinstance(value, list | tuple):
        items = ((str(v.get("path", v.get("module", ""))), v) for v in value if isinstance(v, Mapping))
    else:
        return DtypeMap()
    entries = (_legacy_entry("" if path == "<root>" else path, raw) for path, raw in items)
    return DtypeMap([e for e in entries if e is not None])


# meta keys of schema 1 that are sections now
LEGACY_META_KEYS = ("dtype_map", "env", "compare", "plots", "tables")


def sections_from_meta(meta: dict[str, Any]) -> list[Any]:
    """Schema 1 kept sections in meta: move them out (meta is changed) and return them typed."""
    out: list[Any] = []
    if "dtype_map" in meta:
        out.append(legacy_map(meta.pop("dtype_map")))
    env = meta.pop("env", None)
    if isinstance(env, dict):
        out.append(EnvFacts(**{k: v for k, v in env.items() if k in EnvFacts.__dataclass_fields__}))
    cmp = meta.pop("compare", None)
    if isinstance(cmp, dict):
        settings = {k: v for k, v in cmp.items() if k != "variants"}
        out.append(CompareResult(settings=settings, variants=list(cmp.get("variants") or [])))
    for key, cls in (("tables", Table), ("plots", Plot)):
        items = meta.pop(key, [])
        for item in items if isinstance(items, list) else [items]:
            if isinstance(item, dict):
                out.append(section_from_dict({**item, "type": cls.TYPE}))
    return out
