"""Fact tables for the console: the CompareResult section of `compare` and the EnvFacts of `env`.

console.section_renderables dispatches a section here; findings are rendered by console.py.
"""

from __future__ import annotations

import math
from typing import Any

from rich import box
from rich.table import Table
from rich.text import Text

_STATUS_STYLE = {"ok": "green", "overflows": "bold yellow", "fails": "bold red", "out-of-memory": "bold red"}


def _num(x: Any, fmt: str = ".2g") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return format(x, fmt)


def _bytes(n: float | None) -> str:
    """Compact binary size: 512B, 3.2K, 41M, 1.5G."""
    if n is None:
        return "–"
    for unit in ("B", "K", "M", "G"):
        if abs(n) < 1024 or unit == "G":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.3g}{unit}"
        n /= 1024
    return f"{n:.3g}G"


def _count(x: float | None) -> str:
    if x is None or math.isnan(x):
        return "–"
    for unit in ("", "k", "M"):
        if abs(x) < 1000 or unit == "M":
            return f"{x:.3g}{unit}"
        x /= 1000
    return f"{x:.3g}M"


def _ms(s: float | None) -> str:
    if s is None or math.isnan(s):
        return "–"
    return f"{s * 1e3:.3g}"


def compare_table(meta: dict[str, Any], wide: bool = False) -> Table:
    """One row per precision variant: status, time with spread, speed-up, throughput, memory, errors.

    `wide` adds the weights' size, max abs error and the gradient columns' extras.
    """
    variants = meta.get("variants", [])
    train = meta.get("train_step")
    ref = next((v for v in variants if v["name"] == "fp32"), None)
    ref_median = ref["timing"]["median_s"] if ref and ref.get("timing") else None
    table = Table(
        title=f"compare on {meta.get('device_name') or meta.get('device')} · torch {meta.get('torch')}",
        caption=(
            f"ms: median of {meta.get('repeats')} runs (fp32: twice, at the start and the end) after "
            f"{meta.get('warmup')} warm-up ± half the "
            f"interquartile range · error: ‖low − fp32‖/‖fp32‖ · peak mem: {_memory_method(variants)}"
        ),
        header_style="bold",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    columns = ["precision", "status", "ms", "speed-up", "per s", "peak mem"]
    columns += ["weights"] if wide else []
    columns += ["error"] + (["cosine", "max abs"] if wide else [])
    columns += ["grad error", "scale"] if train else []
    for col in columns:
        table.add_column(col, justify="left" if col in ("precision", "status") else "right", no_wrap=True)
    for v in variants:
        t = v.get("timing") or {}
        err = v.get("error") or {}
        median = t.get("median_s")
        speed = ref_median / median if ref_median and median else None
        half_iqr = (t["q3_s"] - t["q1_s"]) / 2 if t else None
        cells = {
            "precision": v["name"],
            "status": Text(v["status"], style=_STATUS_STYLE.get(v["status"], "")),
            "ms": f"{_ms(median)} ±{_num(half_iqr * 1e3 if half_iqr is not None else None)}" if t else "–",
            "speed-up": f"{speed:.2f}×" if speed else "–",
            "per s": _count(v.get("throughput_per_s")),
            "peak mem": _bytes(v.get("peak_memory_bytes")),
            "weights": _bytes(v.get("weights_bytes")),
            "error": _num(err.get("rel_l2")),
            "cosine": _num(err.get("cosine"), ".5f"),
            "max abs": _num(err.get("max_abs")),
            "grad error": _num((v.get("grad_error") or {}).get("rel_l2")),
            "scale": _num(v.get("loss_scale"), ".0f"),
        }
        table.add_row(*(cells[c] for c in columns))
    return table


def _memory_method(variants: list[dict[str, Any]]) -> str:
    methods = {v.get("memory_method") for v in variants if v.get("memory_method")}
    if methods == {"cuda-allocator"}:
        return "CUDA allocator peak above the baseline"
    return "process RSS sampled every 2 ms above the baseline (approximate)"


def layers_table(meta: dict[str, Any], top: int = 3) -> Table | None:
    """The modules that drift most, per low-precision variant (measured one module at a time)."""
    rows = [
        (v["name"], layer)
        for v in meta.get("variants", [])
        if not v.get("keep_fp32")
        for layer in [x for x in v.get("layers", []) if not x.get("explained_by")][:top]
    ]
    if not rows:
        return None
    table = Table(
        title="per-module error (each module fed the fp32 reference input)",
        header_style="bold",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    for col in ("precision", "module", "type", "error", "max abs", "note"):
        table.add_column(col, justify="right" if col in ("error", "max abs") else "left")
    for name, layer in rows:
        note = (layer.get("failed") or "")[:70] or (
            "input out of range"
            if layer.get("input_overflow")
            else "non-finite"
            if layer.get("nonfinite")
            else ""
        )
        table.add_row(
            name,
            layer["module"],
            layer["module_type"],
            _num(layer["rel_l2"]),
            _num(layer.get("max_abs")),
            note,
        )
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
                _bytes(g.get("memory_bytes")),
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
