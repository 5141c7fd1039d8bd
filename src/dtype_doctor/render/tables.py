"""Fact tables for the console: the CompareResult section of `compare` and the EnvFacts of `env`.

console.section_renderables dispatches a section here; findings are rendered by console.py.
"""

from __future__ import annotations

from typing import Any

from rich import box
from rich.table import Table
from rich.text import Text

from ..sections import CompareResult
from .compare_rows import LAYER_COLUMNS, LAYERS_TITLE, caption, compare_cells, fmt_bytes, layer_cells, title

_STATUS_STYLE = {"ok": "green", "overflows": "bold yellow", "fails": "bold red", "out-of-memory": "bold red"}


def compare_table(section: CompareResult, wide: bool = False) -> Table:
    """One row per precision variant (compare_rows.py: the same rows the HTML and PNG draw)."""
    table = Table(
        title=title(section),
        caption=caption(section),
        header_style="bold",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    columns, rows = compare_cells(section, wide)
    for col in columns:
        table.add_column(col, justify="left" if col in ("precision", "status") else "right", no_wrap=True)
    status = columns.index("status")
    for row in rows:
        cells: list[Any] = list(row)
        cells[status] = Text(row[status], style=_STATUS_STYLE.get(row[status], ""))
        table.add_row(*cells)
    return table


def layers_table(section: CompareResult, top: int = 3) -> Table | None:
    """The modules that drift most, per low-precision variant (measured one module at a time)."""
    rows = layer_cells(section, top)
    if not rows:
        return None
    table = Table(title=LAYERS_TITLE, header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in LAYER_COLUMNS:
        table.add_column(col, justify="right" if col in ("error", "max abs") else "left")
    for row in rows:
        table.add_row(*row)
    return table


_LABELS = {
    "cuda": "CUDA (torch built with)",
    "hip": "ROCm/HIP",
    "cudnn": "cuDNN",
    "driver": "NVIDIA driver",
    "float32_matmul_precision": "float32 matmul precision",
    "tf32_matmul": "TF32 matmul allowed",
    "tf32_cudnn": "TF32 cuDNN allowed",
    "torch_import_error": "torch import error",
    "torch_kernels": "torch kernels",
    "native_bf16": "native bf16 (AVX512-BF16/AMX/ARM)",
    "native_fp16": "native fp16 (AVX512-FP16/AMX-FP16/ARM)",
    "onednn": "oneDNN",
    "fp16_matmul": "fp16 matmul in this build",
    "bf16_matmul": "bf16 matmul in this build",
}


def env_tables(env: dict[str, Any]) -> list[Table]:
    """Facts about this machine: versions, devices, CPU, autocast, precision-changing libraries."""
    tables: list[Table] = []
    versions = Table(title="software", header_style="bold", show_header=False)
    versions.add_column("what", style="bold")
    versions.add_column("value")
    for key, value in env.get("software", {}).items():
        if key == "env_vars":
            for var, text in value.items():
                versions.add_row(f"${var}", text)
        elif key == "driver" and value is None:
            versions.add_row(_LABELS.get(key, key), "–")  # null: no CUDA in this build, nothing to know
        else:
            versions.add_row(_LABELS.get(key, key), _fact(value))
    tables.append(versions)

    gpus = env.get("gpus") or []
    if gpus:
        t = Table(title="GPUs", header_style="bold")
        for col in ("#", "name", "capability", "memory", "bf16", "fp16 tensor cores", "fp8"):
            t.add_column(col)
        for g in gpus:
            t.add_row(
                str(g.get("index")),
                g.get("name", "?"),
                g.get("capability", "?"),
                fmt_bytes(g.get("memory_bytes")),
                g.get("bf16", "?"),
                _fact(g.get("fp16_tensor_cores")),
                _fact(g.get("fp8")),
            )
        tables.append(t)

    cpu = env.get("cpu") or {}
    if cpu:
        t = Table(title="CPU", header_style="bold", show_header=False)
        t.add_column("what", style="bold")
        t.add_column("value")
        for key, value in cpu.items():
            t.add_row(_LABELS.get(key, key), _fact(value))
        tables.append(t)

    autocast = env.get("autocast") or {}
    if autocast:
        t = Table(title="autocast", header_style="bold")
        for col in ("device", "autocast in this build", "device present", "default dtype"):
            t.add_column(col)
        for dev, info in autocast.items():
            t.add_row(
                dev,
                _fact(info.get("available")),
                _fact(info.get("device_present")),
                _fact(info.get("default_dtype")),
            )
        tables.append(t)

    libs = env.get("libraries") or {}
    t = Table(title="libraries that change precision", header_style="bold")
    for col in ("library", "installed", "version", "note"):
        t.add_column(col)
    for name, info in libs.items():
        version = _fact(info.get("version")) if info.get("installed") else "–"
        t.add_row(name, _fact(info.get("installed")), version, info.get("note", ""))
    tables.append(t)
    return tables


def _fact(value: Any) -> str:
    if value is True:
        return "yes"
    if value is False:
        return "no"
    if value is None:
        return "unknown"
    return str(value)
