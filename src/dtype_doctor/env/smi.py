"""`nvidia-smi --query-gpu=...`: the GPU facts a machine without torch's CUDA can still tell."""

from __future__ import annotations

import shutil
import subprocess


def query_gpus(fields: str, timeout: float) -> list[str]:
    """One CSV line per GPU for `fields` (e.g. "name,compute_cap"); [] without nvidia-smi or on any
    failure of it (a hung driver is cut off at `timeout` seconds)."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    try:
        out = subprocess.run(
            [exe, f"--query-gpu={fields}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    return out.stdout.strip().splitlines() if out.returncode == 0 else []
