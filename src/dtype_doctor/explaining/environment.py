"""Facts about the machine explain runs on, read cheaply and without importing torch or the packages.

A log usually comes from another machine, so these facts only break ties the text leaves open
(`catalog.context.ENV_REFINEMENTS`), and every finding they decide says so. Read: NVIDIA apex
installed, and which kind (its package layout, never imported), flash-attn, xformers and
OneFlow/OneDiff (found with `find_spec`, versions from their metadata), each NVIDIA GPU's name
from `/proc/driver/nvidia` and its compute capability (a table of known models; `nvidia-smi`
only when the table does not know the model, with a 2 s limit). `dtype-doctor explain --no-env`
reads none of it.
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass
from typing import Any

from ..catalog.libraries import EXPLAIN_ENVIRONMENT

# GPU model → compute capability (bf16 needs 8.0+), for names found in /proc/driver/nvidia
_CAPABILITY = (
    (r"\bH[12]00\b|\bGH200\b|\bH20\b", 9.0),
    (r"\bB[12]00\b|\bGB200\b", 10.0),
    (r"\bL4\b|\bL40S?\b|RTX [456]0\d0|\bRTX 6000 Ada|\bRTX [2-5]000 Ada", 8.9),
    (r"\bA100\b|\bA30\b|\bA800\b", 8.0),
    (r"\bA10G?\b|\bA40\b|\bA[2-6]000\b|\bA16\b|\bA2\b|RTX 30\d0|RTX A\d{4}", 8.6),
    (r"\bT4\b|RTX 20\d0|\bTITAN RTX\b|Quadro RTX|GTX 16\d0", 7.5),
    (r"\bV100\b|\bTITAN V\b", 7.0),
    (r"\bP100\b", 6.0),
    (r"\bP4\b|\bP40\b|GTX 10\d0|\bTITAN X[Pp]\b|Quadro P", 6.1),
    (r"\bM40\b|\bM60\b|GTX 9\d0|\bTITAN X\b|Quadro M", 5.2),
    (r"\bK80\b|\bK40\b|\bK20\b", 3.7),
)


@dataclass
class Environment:
    """What explain may weigh about this machine, read on first use (`Environment()` reads this one).

    Give `packages` and `gpus` to describe another machine (tests). Unknown is not absent.
    """

    packages: dict[str, str] | None = None  # module → version ("apex": "nvidia 0.1")
    gpus: list[tuple[str, float | None]] | None = None  # (name, compute capability)

    def tags(self) -> dict[str, str]:
        """Context tags (`env-apex`, `env-no-bf16`...) → what on this machine set them."""
        if self.packages is None:
            self.packages = _packages()
        if self.gpus is None:
            self.gpus = _gpus()
        out: dict[str, str] = {}
        apex = self.packages.get("apex", "")
        if apex.startswith("nvidia"):
            out["env-apex"] = f"NVIDIA apex installed ({apex})"
        for name in ("oneflow", "onediff"):
            if name in self.packages:
                out.setdefault("env-oneflow", f"{name} {self.packages[name]} installed")
        for name in ("flash_attn", "xformers"):
            if name in self.packages:
                out[f"env-{name}"] = f"{name} {self.packages[name]} installed"
        old = [(n, c) for n, c in self.gpus if c is not None and c < 8.0]
        if old and len(old) == len(self.gpus):
            name, cap = old[0]
            out["env-no-bf16"] = f"GPU {name} (compute capability {cap:.1f}: no bf16)"
        return out

    def describe(self) -> dict[str, Any] | None:
        """The facts read, or None when nothing was read (no finding needed them)."""
        if self.packages is None and self.gpus is None:
            return None
        return {
            "packages": dict(self.packages or {}),
            "gpus": [{"name": n, "capability": c} for n, c in self.gpus or []],
        }


def _packages() -> dict[str, str]:
    from ..env.packages import package_info  # find_spec and metadata only: no import of the package

    found: dict[str, str] = {}
    for module, dists in ((lib.module, lib.dists) for lib in EXPLAIN_ENVIRONMENT):
        try:
            info = package_info(module, *dists)
        except Exception:
            continue
        if not info.get("installed"):
            continue
        version = str(info.get("version") or "unknown")
        if module == "apex":
            version = f"{_apex_kind(info.get('location'))} {version}"
        found[module] = version
    return found


def _apex_kind(location: object) -> str:
    """NVIDIA apex has `normalization/` or `amp/` in its package; the unrelated PyPI `apex` has not."""
    if isinstance(location, str) and any(
        os.path.isdir(os.path.join(location, d)) for d in ("normalization", "amp")
    ):
        return "nvidia"
    return "other"


def capability(name: str) -> float | None:
    """The compute capability of a GPU model name, when the table knows it."""
    for pattern, cap in _CAPABILITY:
        if re.search(pattern, name):
            return cap
    return None


def _gpus() -> list[tuple[str, float | None]]:
    names = []
    for path in sorted(glob.glob("/proc/driver/nvidia/gpus/*/information"))[:16]:
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read(4096)
        except OSError:
            continue
        m = re.search(r"^Model:\s*(.+)$", text, re.M)
        if m:
            names.append(m.group(1).strip())
    gpus = [(n, capability(n)) for n in names]
    if gpus and any(c is None for _, c in gpus):
        gpus = _smi() or gpus
    return gpus


def _smi() -> list[tuple[str, float | None]]:
    from ..env.smi import query_gpus

    gpus = []
    for line in query_gpus("name,compute_cap", timeout=2)[:16]:
        name, _, cap = line.rpartition(",")
        try:
            gpus.append((name.strip(), float(cap)))
        except ValueError:
            continue
    return gpus
