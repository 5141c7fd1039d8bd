"""`env`: the facts about this machine that decide which precisions can work at all.

torch, CUDA, cuDNN, driver; each GPU's compute capability and whether bf16 is native or only
emulated; the CPU's fp16/bf16 support; autocast per device; and (packages.py) the libraries
that change precision behind the user's back.

Never fails because something is missing: a fact that cannot be known is reported as unknown
(None) or says why.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from typing import Any

from .. import catalog
from ..catalog.family_codes import BF16_UNSUPPORTED_HARDWARE, CPU_HALF_EMULATED
from ..catalog.libraries import VERSIONED
from ..dtypes import dtype_name
from ..report import Finding, Report, Severity
from .packages import dist_version, first_line, library_facts
from .smi import query_gpus

_ENV_VARS = (
    "ACCELERATE_MIXED_PRECISION",
    "ACCELERATE_DOWNCAST_BF16",
    "NVIDIA_TF32_OVERRIDE",
    "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE",
    "CUDA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "DS_ACCELERATOR",
    "XFORMERS_DISABLED",
    "XFORMERS_FORCE_DISABLE_TRITON",
    "ONEFLOW_MLIR_ENABLE_INFERENCE_OPTIMIZATION",
    "PYTORCH_ENABLE_MPS_FALLBACK",
)


# ---------------------------------------------------------------------------------------------
# hardware


def cpu_flags() -> set[str]:
    """CPU feature flags (Linux /proc/cpuinfo, macOS sysctl); empty when unknown."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return set(value.split())
    except OSError:
        pass
    if sys.platform == "darwin":
        flags = set()
        for feature in ("FEAT_BF16", "FEAT_FP16"):
            try:
                out = subprocess.run(
                    ["sysctl", "-n", f"hw.optional.arm.{feature}"], capture_output=True, text=True, timeout=5
                )
                if out.stdout.strip() == "1":
                    flags.add(feature.lower())
            except Exception:
                pass
        return flags
    return set()


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_facts(torch: Any) -> dict[str, Any]:
    flags = cpu_flags()
    native_bf16 = bool(flags & {"avx512_bf16", "amx_bf16", "bf16", "feat_bf16"})
    native_fp16 = bool(flags & {"avx512_fp16", "amx_fp16", "fphp", "asimdhp", "feat_fp16"})
    return {
        "model": _cpu_model(),
        "architecture": platform.machine(),
        "torch_kernels": _safe(lambda: torch.backends.cpu.get_cpu_capability()),
        "threads": _safe(lambda: torch.get_num_threads()),
        "native_bf16": native_bf16 if flags else None,
        "native_fp16": native_fp16 if flags else None,
        "onednn": _safe(lambda: torch.backends.mkldnn.is_available()),
        "fp16_matmul": _runs_on_cpu(torch, "float16"),
        "bf16_matmul": _runs_on_cpu(torch, "bfloat16"),
    }


def _runs_on_cpu(torch: Any, dtype: str) -> bool | str:
    try:
        a = torch.ones(4, 4, dtype=getattr(torch, dtype))
        (a @ a).sum().item()
        return True
    except Exception as exc:
        return f"no: {first_line(exc)}"


def _safe(fn: Any) -> Any:
    try:
        return fn()
    except Exception:
        return None


def gpu_facts(torch: Any) -> list[dict[str, Any]]:
    """One entry per visible CUDA/ROCm device."""
    if not _safe(lambda: torch.cuda.is_available()):
        return []
    gpus = []
    hip = bool(getattr(torch.version, "hip", None))
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        major, minor = props.major, props.minor
        native = _bf16_native(torch, i)
        if native is None:
            native = hip or major >= 8
        emulated = (
            False if native else bool(_safe(lambda: torch.cuda.is_bf16_supported(including_emulation=True)))
        )
        gpus.append(
            {
                "index": i,
                "name": props.name,
                "capability": f"{major}.{minor}",
                "sm": major * 10 + minor,
                "memory_bytes": int(props.total_memory),
                "bf16": "native" if native else ("emulated only" if emulated else "no"),
                "fp16_tensor_cores": major >= 7 or hip,
                "tf32": major >= 8,
                "fp8": (major, minor) >= (8, 9),
            }
        )
    return gpus


def _bf16_native(torch: Any, index: int) -> bool | None:
    """is_bf16_supported(including_emulation=False) on that device; None on old torch."""
    try:
        with torch.cuda.device(index):
            return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    except TypeError:
        return None  # torch without including_emulation: decide from the capability
    except Exception:
        return None


def _driver() -> str | None:
    lines = query_gpus("driver_version", timeout=10)
    return lines[0].strip() if lines else None


def autocast_facts(torch: Any) -> dict[str, Any]:
    present = {
        "cpu": True,
        "cuda": _safe(lambda: torch.cuda.is_available()),
        "xpu": _safe(lambda: torch.xpu.is_available()),
        "mps": _safe(lambda: torch.backends.mps.is_available()),
    }
    out = {}
    for dev, here in present.items():
        available = _safe(lambda dev=dev: torch.amp.is_autocast_available(dev))
        dtype = _safe(lambda dev=dev: torch.get_autocast_dtype(dev))
        out[dev] = {
            "available": available,
            "device_present": here,
            "default_dtype": dtype_name(dtype) if dtype is not None else None,
        }
    return out


def software_facts(torch: Any | None) -> dict[str, Any]:
    facts: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": getattr(torch, "__version__", None) if torch else "not installed",
    }
    if torch is None:
        return facts
    hip = getattr(torch.version, "hip", None)
    if hip:
        facts["hip"] = hip
    cudnn = (
        _safe(lambda: torch.backends.cudnn.version())
        if _safe(lambda: torch.backends.cudnn.is_available())
        else None
    )
    facts.update(
        {
            "cuda": torch.version.cuda or ("none (ROCm build)" if hip else "none (CPU build)"),
            "cudnn": cudnn if cudnn is not None else "none in this build",
            "driver": _driver() or ("unknown (no nvidia-smi)" if torch.version.cuda else None),
            "float32_matmul_precision": _safe(lambda: torch.get_float32_matmul_precision()),
            "tf32_matmul": _safe(lambda: torch.backends.cuda.matmul.allow_tf32),
            "tf32_cudnn": _safe(lambda: torch.backends.cudnn.allow_tf32),
        }
    )
    for name in VERSIONED:
        facts[name] = dist_version(name)
    facts["env_vars"] = {var: os.environ[var] for var in _ENV_VARS if var in os.environ}
    return facts


def _hardware_findings(gpus: list[dict[str, Any]], cpu: dict[str, Any]) -> list[Finding]:
    out = []
    for g in gpus:
        if g["bf16"] != "native":
            out.append(
                catalog.finding(
                    BF16_UNSUPPORTED_HARDWARE,
                    severity=Severity.WARNING,
                    message=(
                        f"GPU {g['index']} {g['name']} (sm{g['sm']}): bf16 is "
                        f"{g['bf16']}; fp16 with torch.amp.GradScaler is the fast low precision here"
                    ),
                    data={"gpu": g["index"], "bf16": g["bf16"]},
                )
            )
    if not gpus and cpu.get("native_bf16") is False and cpu.get("native_fp16") is False:
        out.append(
            catalog.finding(
                CPU_HALF_EMULATED,
                names={"missing": "AVX512-BF16/AMX-BF16 and AVX512-FP16/AMX-FP16"},
                message=f"{cpu.get('model')}: no native fp16/bf16 arithmetic (torch kernels: {cpu.get('torch_kernels')})",
            )
        )
    return out


# ---------------------------------------------------------------------------------------------
# the public entry point


def environment() -> Report:
    """Facts about this machine (an EnvFacts section), and a finding for each hazard."""
    from ..sections import EnvFacts

    report = Report(tool="env")
    try:
        import torch
    except Exception as exc:
        torch = None
        no_torch = {"software": {**software_facts(None), "torch_import_error": first_line(exc)}}
    if torch is not None:
        gpus = gpu_facts(torch)
        cpu = cpu_facts(torch)
        facts: dict[str, Any] = {
            "software": software_facts(torch),
            "gpus": gpus,
            "cpu": cpu,
            "autocast": autocast_facts(torch),
        }
        torch_version = torch.__version__
    else:
        gpus, cpu, facts, torch_version = [], {}, no_torch, None
    libs, findings = library_facts(torch_version, gpus)
    facts["libraries"] = libs
    report.sections.append(EnvFacts(**facts))
    for f in [*_hardware_findings(gpus, cpu), *findings]:
        report.add(f)
    return report


__all__ = ["cpu_facts", "environment", "gpu_facts"]
