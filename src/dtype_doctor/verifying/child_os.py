"""What a forked replay child inherits at the OS level, cut off from the user's program: file
descriptors (a logging FileHandler's file, a raw fd, an sqlite database, a socket) point at
/dev/null, and writable shared mappings (`share_memory_()` tensors, `np.memmap`, /dev/shm) become
private (the same file mapped copy-on-write, else a copy, else read-only), so the replay's writes
land in the child's memory only (Linux; elsewhere nothing is done and the Python guard is the only
line). No torch import.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from collections.abc import Iterable

_PROT = {"r": 1, "w": 2, "x": 4}  # PROT_READ, PROT_WRITE, PROT_EXEC
_MAP_PRIVATE, _MAP_FIXED, _MAP_ANONYMOUS = 0x02, 0x10, 0x20
_MAP_FAILED = ctypes.c_void_p(-1).value


def cut_off(keep: Iterable[int]) -> None:
    """Every inherited descriptor but 0–2 and `keep` made /dev/null, every writable shared mapping
    private. Best effort: a step the system refuses is skipped."""
    if not sys.platform.startswith("linux"):
        return
    _descriptors_to_null(set(keep))
    _shared_mappings_private()


def _descriptors_to_null(keep: set[int]) -> None:
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        return
    null = os.open(os.devnull, os.O_RDWR)
    for fd in fds:
        if fd > 2 and fd != null and fd not in keep:
            with contextlib.suppress(OSError):
                os.dup2(null, fd, inheritable=False)
    os.close(null)


def _shared_mappings_private() -> None:
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
            regions = [_region(line) for line in fh]
    except OSError:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    for region in regions:
        if region is not None:
            _make_private(libc, *region)


def _region(line: str) -> tuple[int, int, int, int, str] | None:
    """(start, size, prot, file offset, path) of a writable shared mapping of memory (not of a
    device), else None."""
    parts = line.split(maxsplit=5)
    if len(parts) < 5 or len(parts[1]) != 4 or parts[1][1] != "w" or parts[1][3] != "s":
        return None
    path = parts[5].strip() if len(parts) > 5 else ""
    if path.startswith("/dev/") and not path.startswith(("/dev/shm/", "/dev/zero")):
        return None  # a device's memory (a GPU's, a frame buffer): never copied
    start, end = (int(x, 16) for x in parts[0].split("-"))
    prot = sum(_PROT[c] for c in parts[1][:3] if c in _PROT)
    return start, end - start, prot, int(parts[2], 16), path


# a shared mapping with no file to map again (anonymous, or its file removed) is copied up to this
# size; a larger one is made read-only (a write then ends the replay, never reaching the program)
COPY_LIMIT = 256 << 20


def _make_private(libc: ctypes.CDLL, start: int, size: int, prot: int, offset: int, path: str) -> None:
    """The mapping at `start` replaced by a private one with the same bytes: the same file mapped
    copy-on-write, else an anonymous copy, else (too big to copy) the shared one read-only."""
    if path.startswith("/") and not path.endswith(" (deleted)") and os.path.isfile(path):
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            fd = -1
        if fd >= 0:
            got = libc.mmap(start, size, prot, _MAP_PRIVATE | _MAP_FIXED, fd, offset)
            os.close(fd)
            if got not in (None, _MAP_FAILED):
                return
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    if size > COPY_LIMIT:
        libc.mprotect(start, size, prot & ~_PROT["w"])
        return
    saved = ctypes.create_string_buffer(size)
    ctypes.memmove(saved, start, size)
    got = libc.mmap(start, size, _PROT["r"] | _PROT["w"], _MAP_PRIVATE | _MAP_FIXED | _MAP_ANONYMOUS, -1, 0)
    if got in (None, _MAP_FAILED):
        libc.mprotect(start, size, prot & ~_PROT["w"])  # refused: never written through, at least
        return
    ctypes.memmove(start, saved, size)
    if prot != _PROT["r"] | _PROT["w"]:
        libc.mprotect(start, size, prot)
