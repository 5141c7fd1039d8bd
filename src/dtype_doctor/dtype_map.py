"""The dtype map of a model: its one shape is `sections.DtypeMap`. No torch import.

Producers append a DtypeMap section to their report: `module_dtype_map(model)` (each module and the
tensors registered directly on it: the training-loop callbacks, distributed runs) and
`checking.audit.dtype_map` (folded: a uniform subtree is one entry, identical ModuleList blocks are
one entry with `repeat`; audit and check). Renderers and merges read it with `report_map`.
`sections.legacy_map` reads the shapes schema-1 reports held (in `meta["dtype_map"]` and in audit's
`dtype-map` finding data); it is used only when such a report is read.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .sections import DtypeMap, ModuleDtypes, legacy_map


def report_map(report: Any) -> list[ModuleDtypes]:
    """A report's dtype map: the modules of its DtypeMap sections (none: an empty list)."""
    return [m for s in report.sections if isinstance(s, DtypeMap) for m in s.modules]


def module_dtype_map(model: Any) -> DtypeMap:
    """The map of a torch.nn.Module: each module's type and the dtypes of the parameters and floating
    buffers registered directly on it (walks named_modules once; reads no tensor data, so meta works)."""
    from .dtypes import canonical

    modules = []
    for name, module in model.named_modules():
        counts: dict[str, int] = {}
        for tensor in (*module._parameters.values(), *module._buffers.values()):
            if tensor is None or not (tensor.is_floating_point() or tensor.is_complex()):
                continue
            dtype = canonical(str(tensor.dtype)) or str(tensor.dtype)
            counts[dtype] = counts.get(dtype, 0) + 1
        modules.append(ModuleDtypes(name, type(module).__name__, counts))
    return DtypeMap(modules)


def _human(n: int) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return str(n)


def format_map(modules: Iterable[ModuleDtypes]) -> str:
    """The map as indented text, one line per entry, nested under the first entry (the map's root):
    `0-31 (LlamaDecoderLayer ×32)  float16 202M, float32 262K`."""
    lines = []
    root: str | None = None
    for m in modules:
        if root is None:
            root = m.path
        rest = m.path[len(root) :].lstrip(".") if m.path.startswith(root) else m.path
        depth = rest.count(".") + 1 if rest else 0
        name = m.path.rpartition(".")[2] if depth else m.path or "<root>"
        kind = m.type + (f" ×{m.repeat}" if m.repeat > 1 else "")
        dtypes = ", ".join(f"{d} {_human(n)}" for d, n in sorted(m.dtypes.items(), key=lambda kv: -kv[1]))
        own = "  [" + ", ".join(f"{k}: {v}" for k, v in m.own.items()) + "]" if m.own else ""
        lines.append(f"{'  ' * depth}{name} ({kind})  {dtypes or 'no parameters'}{own}")
    return "\n".join(lines)


# ---------------------------------------------------------------- schema 1


def lift_finding_maps(findings: Iterable[Any]) -> list[DtypeMap]:
    """Schema-1 audit kept its rows in the `dtype-map` finding's data: move them (data is changed)."""
    out = []
    for f in findings:
        if isinstance(f.data, dict) and "dtype_map" in f.data:
            out.append(legacy_map(f.data.pop("dtype_map")))
    return out
