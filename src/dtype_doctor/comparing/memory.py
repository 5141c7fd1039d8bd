"""Peak memory of one precision variant (its build and first run), above what was live before.

CUDA: the caching allocator's exact peak (`max_memory_allocated`). CPU: torch keeps no CPU
allocator statistics and the process RSS barely moves when the heap reuses freed pages (it read
0B), so the peak is the model's weights and buffers plus the peak sum of the live tensor storages
its first run makes (followed by a dispatch mode; views and in-place results of existing tensors
are not new): exact for tensors, blind to the allocator's own overhead and to scratch memory a
kernel frees before it returns. The build itself is not counted (an fp32 copy converted to fp16
is the factory's cost, not the precision's).
"""

from __future__ import annotations

import contextlib
import ctypes
import weakref
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

CUDA_METHOD = "cuda-allocator"
CPU_METHOD = "live-tensor-bytes"


def release_host_memory() -> None:
    """Give freed heap pages back to the OS (glibc) between variants."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


class _LiveBytes(TorchDispatchMode):
    """Counts the bytes of every storage an op makes until the storage is freed; keeps the peak."""

    def __init__(self) -> None:
        super().__init__()
        self.now = self.peak = 0
        self._live: set[int] = set()

    def _freed(self, key: int, nbytes: int) -> None:
        self._live.discard(key)
        self.now -= nbytes

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        try:
            given = {_ptr(t) for t in tree_leaves((args, kwargs))}  # views and in-place: not new
            for t in tree_leaves(out):
                if _ptr(t) not in given:
                    self._count(t.untyped_storage())
        except Exception:  # a storage we cannot read is not counted; the model's output stays
            pass
        return out

    def _count(self, storage: torch.UntypedStorage) -> None:
        key = storage.data_ptr()
        if not key or key in self._live:
            return
        nbytes = storage.nbytes()
        self._live.add(key)
        self.now += nbytes
        self.peak = max(self.peak, self.now)
        weakref.finalize(storage, self._freed, key, nbytes)


def _ptr(t: Any) -> int:
    if type(t) is not torch.Tensor or t.device.type == "meta":
        return 0
    return t.untyped_storage().data_ptr()


class PeakMemory:
    """`with PeakMemory(device) as mem:` build, `mem.run_starts(weights_bytes)`, run; then
    `mem.peak_bytes` (None when unmeasured) and `mem.method`."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.peak_bytes: int | None = None
        self.method = "unknown"
        self._base = 0
        self._live: _LiveBytes | None = None
        self._weights = 0

    def __enter__(self) -> PeakMemory:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)
            self._base = torch.cuda.memory_allocated(self.device)
            self.method = CUDA_METHOD
            return self
        self.method = CPU_METHOD
        return self

    def run_starts(self, weights_bytes: int) -> None:
        """The model is built (`weights_bytes` of parameters and buffers): count from here (CPU)."""
        if self.device.type == "cuda" or self._live is not None:
            return
        self._weights = weights_bytes
        self._live = _LiveBytes()
        self._live.__enter__()

    def __exit__(self, *exc: object) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak_bytes = torch.cuda.max_memory_allocated(self.device) - self._base
            return
        if self._live is not None:
            self._live.__exit__(None, None, None)
            self.peak_bytes = self._weights + self._live.peak
