"""The device a comparison runs on: resolved, named, and cleaned between variants."""

from __future__ import annotations

import gc
import platform

import torch

from ..errors import DoctorError
from .memory import release_host_memory


def resolve_device(device: str | torch.device | None) -> torch.device:
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise DoctorError(f"bad device {device!r}: {exc}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise DoctorError("device 'cuda' asked for, but torch sees no CUDA device here")
    return dev


def device_name(dev: torch.device) -> str:
    if dev.type == "cuda":
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        major, minor = torch.cuda.get_device_capability(index)
        return f"{torch.cuda.get_device_name(index)} (sm{major}{minor})"
    if dev.type == "cpu":
        try:
            cap = torch.backends.cpu.get_cpu_capability()
        except Exception:
            cap = "?"
        return f"{platform.processor() or platform.machine()} CPU, {torch.get_num_threads()} threads, {cap}"
    return str(dev)


def collect(dev: torch.device) -> None:
    """Free what the last variant left, so the next one's memory baseline is honest.

    Models are freed by reference counting; a full gc.collect() (slow with torch loaded) is
    worth it only before emptying the CUDA cache.
    """
    if dev.type == "cuda":
        gc.collect()
        torch.cuda.empty_cache()
    release_host_memory()
