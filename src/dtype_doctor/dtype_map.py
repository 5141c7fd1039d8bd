"""The dtype map of a model, as producers store it and renderers read it. No torch import.

A report holds its map as a `sections.DtypeMap`; these shapes are what producers hand to
`DtypeMap.from_value` (and what schema-1 reports and `finding.data["dtype_map"]`, audit's folded rows, hold):
    {"<module path>": {"type": "Linear", "dtypes": {"float16": 2}}, ...}      (root is "")
    {"<module path>": "float16", ...}
    [{"path" or "module": "<module path>", "type": ..., "dtypes": {...}, "repeat": 32}, ...]
`dtypes` maps dtype → a count (tensors or elements); a list of dtypes or a single "dtype" also works.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class MapEntry:
    path: str
    type: str
    dtypes: dict[str, int]
    repeat: int = 1


def _entry(path: str, value: Any) -> MapEntry | None:
    if isinstance(value, str):
        return MapEntry(path, "", {value: 1})
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
    return MapEntry(path, str(value.get("type", "") or ""), dtypes, repeat if isinstance(repeat, int) else 1)


def iter_map(value: Any) -> Iterator[MapEntry]:
    """The entries of a dtype map in any accepted shape; anything else yields nothing."""
    if isinstance(value, Mapping):
        items = ((str(k), v) for k, v in value.items())
    elif isinstance(value, list | tuple):
        items = ((str(v.get("path", v.get("module", ""))), v) for v in value if isinstance(v, Mapping))
    else:
        return
    for path, raw in items:
        entry = _entry("" if path == "<root>" else path, raw)
        if entry is not None:
            yield entry


def report_map(report: Any) -> list[MapEntry]:
    """A report's dtype map: its DtypeMap section, else the maps its findings carry (audit's rows)."""
    from .sections import DtypeMap

    section = report.section(DtypeMap)
    if section is not None:
        return [MapEntry(m.path, m.type, dict(m.dtypes), m.repeat) for m in section.modules]
    entries = list(iter_map(report.meta.get("dtype_map")))  # a producer not yet on sections
    if entries:
        return entries
    for f in report.findings:
        if isinstance(f.data, Mapping):
            entries.extend(iter_map(f.data.get("dtype_map")))
    return entries


def module_dtype_map(model: Any) -> dict[str, dict[str, Any]]:
    """The map of a torch.nn.Module: each module's type and the dtypes of the parameters and floating
    buffers registered directly on it (walks named_modules once; reads no tensor data, so meta works)."""
    from .dtypes import canonical

    result: dict[str, dict[str, Any]] = {}
    for name, module in model.named_modules():
        counts: dict[str, int] = {}
        for tensor in (*module._parameters.values(), *module._buffers.values()):
            if tensor is None or not (tensor.is_floating_point() or tensor.is_complex()):
                continue
            dtype = canonical(str(tensor.dtype)) or str(tensor.dtype)
            counts[dtype] = counts.get(dtype, 0) + 1
        result[name] = {"type": type(module).__name__, "dtypes": counts}
    return result
