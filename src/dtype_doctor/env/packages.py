"""Packages that change precision behind the user's back, found without importing them.

NVIDIA apex and the unrelated PyPI `apex`, OneFlow/OneDiff, xformers, flash-attn, bitsandbytes,
DeepSpeed, Transformer Engine, IPEX, accelerate's configured mixed precision. Packages are
found with importlib.util.find_spec and importlib.metadata; only apex is imported (guarded),
because whether it imports is the fact that matters. No torch import here.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .. import catalog
from ..catalog.family_codes import (
    ACCELERATE_MIXED_PRECISION,
    APEX_CONFLICT,
    APEX_NO_CUDA_EXT,
    EXTENSION_TORCH_MISMATCH,
    FLASH_ATTN_UNSUPPORTED_GPU,
    ONEFLOW_TORCH_AUTOCAST,
    PYPI_APEX_CLASH,
)
from ..catalog.libraries import APEX_CONSUMERS, ONEFLOW_STACK, PRECISION_LIBRARIES
from ..report import Evidence, Finding, Severity

_APEX_IMPORT = re.compile(rb"^[ \t]*(?:from[ \t]+apex[\s.]|import[ \t]+apex\b)", re.M)
_VERSION_ASSIGN = re.compile(
    r"""^\s*(?:__version__|version|VERSION)\s*(?::\s*str\s*)?=\s*['"]([^'"]+)['"]""", re.M
)

# ---------------------------------------------------------------------------------------------
# package facts without imports


def _spec(name: str) -> importlib.machinery.ModuleSpec | None:
    """find_spec for a top-level name; never raises, never imports it."""
    try:
        return importlib.util.find_spec(name)
    except Exception:
        return None


def _package_dirs(spec: importlib.machinery.ModuleSpec | None) -> list[Path]:
    if spec is None:
        return []
    if spec.submodule_search_locations:
        return [Path(p) for p in spec.submodule_search_locations]
    return [Path(spec.origin).parent] if spec.origin else []


def dist_version(*dist_names: str) -> str | None:
    for name in dist_names:
        try:
            return importlib.metadata.version(name)
        except Exception:
            continue
    return None


def _source_version(spec: importlib.machinery.ModuleSpec | None) -> str | None:
    """`__version__ = "..."` read from the package's files, for packages with no metadata."""
    for d in _package_dirs(spec):
        for fname in ("__init__.py", "version.py", "_version.py", "__version__.py"):
            try:
                text = (d / fname).read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            m = _VERSION_ASSIGN.search(text)
            if m:
                return m.group(1)
    return None


def package_info(module: str, *dist_names: str) -> dict[str, Any]:
    """Installed?, version (metadata, else the source's __version__), location. No import."""
    spec = _spec(module)
    if spec is None:
        return {"installed": False, "version": None}
    version = dist_version(*(dist_names or (module,))) or _source_version(spec)
    dirs = _package_dirs(spec)
    return {
        "installed": True,
        "version": version or "unknown",
        "location": str(dirs[0]) if dirs else (spec.origin or None),
    }


def _torch_pin(dist: str) -> str | None:
    """The exact `torch==X` a distribution declares, if any."""
    try:
        requires = importlib.metadata.requires(dist) or []
    except Exception:
        return None
    for req in requires:
        m = re.match(r"^\s*torch\s*==\s*([\w.+-]+)\s*(?:;.*)?$", req)
        if m:
            return m.group(1)
    return None


def _same_release(a: str, b: str) -> bool:
    return a.split("+")[0] == b.split("+")[0]


# ---------------------------------------------------------------------------------------------
# apex: NVIDIA's, or the unrelated PyPI package of the same name


def apex_info() -> dict[str, Any]:
    """What `apex` is here. Imports it (guarded): whether it imports is the fact."""
    spec = _spec("apex")
    info: dict[str, Any] = {"installed": spec is not None, "version": None}
    if spec is None:
        return info
    dirs = _package_dirs(spec)
    nvidia_layout = any((d / "normalization").is_dir() or (d / "amp").is_dir() for d in dirs)
    info.update(
        version=dist_version("apex") or _source_version(spec) or "unknown",
        location=str(dirs[0]) if dirs else spec.origin,
        kind="nvidia" if nvidia_layout else "other",
    )
    probe = _probe_apex()
    if "import_error" in probe:
        info["import_error"] = probe["import_error"]
        if not nvidia_layout or "pyramid" in probe["import_error"]:
            info["kind"] = "pypi"
        return info
    if nvidia_layout:
        info["fused_norms"] = probe.get("fused_norms", False)
        if "fused_norms_error" in probe:
            info["fused_norms_error"] = probe["fused_norms_error"]
        info["cuda_ext"] = _spec("fused_layer_norm_cuda") is not None
    else:
        info["kind"] = "pypi"
    return info


APEX_PROBE_TIMEOUT = 30.0  # seconds: a real apex imports in a few

_APEX_PROBE = """
import json, sys
sys.path[:] = json.loads(sys.argv[1])
out = {}
def line(exc):
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")
try:
    import apex
except BaseException as exc:
    out["import_error"] = line(exc)
else:
    try:
        from apex.normalization import FusedLayerNorm, FusedRMSNorm
        out["fused_norms"] = True
    except BaseException as exc:
        out["fused_norms"] = False
        out["fused_norms_error"] = line(exc)
sys.stdout.flush()
sys.__stdout__.write("\\n@@dtype-doctor-probe@@" + json.dumps(out) + "\\n")
sys.__stdout__.flush()
"""


def _probe_apex() -> dict[str, Any]:
    """Import apex in a child process: an apex that hangs at import, or ends the process, cannot
    take `env` with it. What the import said, as facts ({"import_error": ...} when it failed)."""
    import json
    import os
    import subprocess
    import sys

    try:
        limit = float(os.environ.get("DTYPE_DOCTOR_APEX_PROBE_TIMEOUT", APEX_PROBE_TIMEOUT))
    except ValueError:
        limit = APEX_PROBE_TIMEOUT
    try:
        done = subprocess.run(
            [sys.executable, "-c", _APEX_PROBE, json.dumps(sys.path)],
            capture_output=True, text=True, timeout=limit, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"import_error": f"TimeoutError: import apex did not finish in {limit:g} s"}
    except OSError as exc:
        return {"import_error": f"OSError: could not start a probe ({exc.strerror or exc})"}
    marker = "@@dtype-doctor-probe@@"
    for text in reversed(done.stdout.splitlines()):
        if text.startswith(marker):
            try:
                return dict(json.loads(text[len(marker) :]))
            except ValueError:
                break
    return {"import_error": f"SystemExit: import apex ended the process (exit code {done.returncode})"}


def apex_consumers(packages: Iterable[str] = APEX_CONSUMERS, limit: int = 8) -> list[str]:
    """`package/relative/file.py` of installed packages whose source imports apex."""
    hits: list[str] = []
    for name in packages:
        for root in _package_dirs(_spec(name)):
            for dirpath, _, files in os.walk(root):
                for fname in files:
                    if not fname.endswith(".py"):
                        continue
                    path = Path(dirpath) / fname
                    try:
                        data = path.read_bytes()
                    except OSError:
                        continue
                    if b"apex" in data and _APEX_IMPORT.search(data):
                        hits.append(f"{name}/{path.relative_to(root).as_posix()}")
                        if len(hits) >= limit:
                            return hits
    return hits


# ---------------------------------------------------------------------------------------------
# accelerate's configured mixed precision


def accelerate_config() -> dict[str, Any]:
    """mixed_precision from ACCELERATE_MIXED_PRECISION and accelerate's default config file."""
    out: dict[str, Any] = {}
    env = os.environ.get("ACCELERATE_MIXED_PRECISION")
    if env:
        out["env"] = env.strip().lower()
    hf_home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "huggingface"
    )
    for fname in ("default_config.yaml", "default_config.json"):
        path = Path(hf_home) / "accelerate" / fname
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        m = re.search(r"""^\s*["']?mixed_precision["']?\s*:\s*["']?([\w-]+)""", text, re.M)
        out["config_file"] = str(path)
        out["config"] = m.group(1).lower() if m else None
        break
    return out


# ---------------------------------------------------------------------------------------------
# libraries and their findings


def library_facts(
    torch_version: str | None, gpus: list[dict[str, Any]]
) -> tuple[dict[str, Any], list[Finding]]:
    """Every precision-changing library: installed?, version, a note; and a finding per hazard."""
    libs: dict[str, Any] = {"apex": apex_info()}
    findings = _apex_findings(libs["apex"])
    findings += _oneflow(libs, torch_version)
    for lib in PRECISION_LIBRARIES:
        libs[lib.module] = info = package_info(lib.module, *lib.dists)
        if info["installed"]:
            info["note"] = lib.note
            findings += _torch_mismatch(lib.dists[0], info, torch_version)
    findings += _flash_attn(libs["flash_attn"], gpus)
    findings += _accelerate(libs["accelerate"])
    return libs, findings


def _oneflow(libs: dict[str, Any], torch_version: str | None) -> list[Finding]:
    for module in ONEFLOW_STACK:
        libs[module] = package_info(module)
    flow = [m for m in ONEFLOW_STACK if libs[m]["installed"]]
    if not flow:
        return []
    libs["oneflow"]["note"] = "do not wrap OneFlow-compiled modules in torch.autocast"
    versions = ", ".join(f"{m} {libs[m]['version']}" for m in flow)
    return [
        catalog.finding(
            ONEFLOW_TORCH_AUTOCAST,
            message=f"{versions} installed next to torch {torch_version}",
            evidence=[Evidence(f"{m}: {libs[m].get('location')}") for m in flow],
            data={"packages": {m: libs[m]["version"] for m in flow}},
        )
    ]


def _torch_mismatch(dist: str, info: dict[str, Any], torch_version: str | None) -> list[Finding]:
    pin = _torch_pin(dist)
    if not (pin and torch_version) or _same_release(pin, torch_version):
        return []
    info["note"] = f"built for torch {pin}"
    return [
        catalog.finding(
            EXTENSION_TORCH_MISMATCH,
            names={
                "package": dist,
                "version": info["version"],
                "requirement": f"torch=={pin}",
                "torch": torch_version,
            },
            message=f"{dist} {info['version']} requires torch=={pin}; torch {torch_version} is installed",
            data={"package": dist, "pin": pin},
        )
    ]


def _flash_attn(info: dict[str, Any], gpus: list[dict[str, Any]]) -> list[Finding]:
    if not info["installed"]:
        return []
    return [
        catalog.finding(
            FLASH_ATTN_UNSUPPORTED_GPU,
            names={"gpu": g["name"], "capability": g["sm"]},
            message=f"flash-attn {info['version']} on {g['name']} (sm{g['capability']})",
        )
        for g in gpus
        if g["sm"] < 80
    ]


def _accelerate(info: dict[str, Any]) -> list[Finding]:
    acc = accelerate_config()
    configured = acc.get("env") or acc.get("config")
    info["mixed_precision"] = configured
    if info["installed"] and configured:
        info["note"] = f"configured mixed_precision={configured}"
    return [
        catalog.finding(
            ACCELERATE_MIXED_PRECISION,
            names={"source": source, "dtype": value},
            message=f"{source}: mixed_precision={value}",
            data={"source": source, "mixed_precision": value},
        )
        for source, value in (
            ("ACCELERATE_MIXED_PRECISION", acc.get("env")),
            (acc.get("config_file"), acc.get("config")),
        )
        if value and value != "no"
    ]


def _version_text(info: dict[str, Any]) -> str:
    version = info.get("version")
    return f"version {version}" if version and version != "unknown" else "version unknown"


def _apex_findings(apex: dict[str, Any]) -> list[Finding]:
    if not apex.get("installed"):
        return []
    where = f"{apex.get('location')}"
    if apex.get("kind") == "pypi":
        detail = apex.get("import_error") or "it is not NVIDIA apex"
        apex["note"] = "the unrelated PyPI package, not NVIDIA apex"
        return [
            catalog.finding(
                PYPI_APEX_CLASH,
                names={"detail": detail},
                message=f"apex {apex.get('version')} at {where} is not NVIDIA apex: {detail}",
                evidence=[Evidence(detail, source=where)],
            )
        ]
    error = apex.get("import_error")
    if error and "undefined symbol" in error:
        apex["note"] = "NVIDIA apex built for another torch"
        return [
            catalog.finding(
                EXTENSION_TORCH_MISMATCH,
                names={
                    "package": "apex",
                    "version": apex.get("version"),
                    "requirement": "its build's torch",
                    "torch": "this",
                },
                message=f"NVIDIA apex fails to import: {error}",
            )
        ]
    out: list[Finding] = []
    consumers = apex_consumers()
    apex["consumers"] = consumers
    swap = (
        f"{', '.join(sorted({c.split('/')[0] for c in consumers}))} imports apex and may use its fused kernels"
        if consumers
        else "no installed library among those checked imports it; your own code or others may"
    )
    apex["note"] = "NVIDIA apex" + (", fused norms importable" if apex.get("fused_norms") else "")
    f = catalog.finding(
        APEX_CONFLICT,
        context=["env"],
        message=f"NVIDIA apex ({_version_text(apex)}) is importable from {where}: {swap}",
        evidence=[Evidence(f"{c} imports apex", source=c) for c in consumers],
        data={
            "consumers": consumers,
            "fused_norms": apex.get("fused_norms"),
            "cuda_ext": apex.get("cuda_ext"),
        },
    )
    f.severity = Severity.WARNING if consumers else Severity.INFO
    out.append(f)
    if apex.get("fused_norms") and apex.get("cuda_ext") is False:
        out.append(
            catalog.finding(
                APEX_NO_CUDA_EXT,
                message="apex.normalization imports, but its CUDA extension fused_layer_norm_cuda is missing",
            )
        )
    return out


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


__all__ = [
    "accelerate_config",
    "apex_consumers",
    "apex_info",
    "dist_version",
    "library_facts",
    "package_info",
]
