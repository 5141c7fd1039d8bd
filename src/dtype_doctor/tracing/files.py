"""Whose file is it: the one answer to "is this the user's code?".

A file is the tool's (this package), a library's (an installed package, Python's own library, a
console-script launcher, a frozen module) or else the user's. Every part that needs the answer (the
frame walkers, the places a report shows, the files a fix may edit, the experiment's interventions)
asks here; none keeps its own list of folders. Imports nothing heavy: `explain` runs without torch.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import sysconfig


def _folder(path: str | None) -> str | None:
    return os.path.realpath(path) + os.sep if path and os.path.realpath(path) != os.sep else None


TOOL_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # dtype_doctor/
_torch = importlib.util.find_spec("torch")
TORCH_DIR = os.path.dirname(_torch.origin) + os.sep if _torch and _torch.origin else "//no torch" + os.sep
_paths = sysconfig.get_paths()
LIBRARY_DIRS = tuple(
    sorted({d for key in ("purelib", "platlib", "stdlib", "platstdlib") if (d := _folder(_paths.get(key)))})
)
# console-script launchers (`.venv/bin/dtype-doctor`, `torchrun`): a library's, never the user's code
SCRIPTS_DIR = _folder(_paths.get("scripts")) or "//no scripts dir" + os.sep
_PACKAGES = re.compile(r"[\\/](site|dist)-packages[\\/]")


def tool_file(path: str) -> bool:
    """One of dtype-doctor's own files."""
    return path.startswith(TOOL_DIR) or os.path.realpath(path).startswith(TOOL_DIR)


@functools.lru_cache(maxsize=4096)
def library_file(path: str) -> bool:
    """A file of an installed package or of Python's own library, a launcher, a frozen module:
    never the user's."""
    if path.startswith("<frozen") or _PACKAGES.search(path):
        return True
    roots = (*LIBRARY_DIRS, SCRIPTS_DIR)
    return path.startswith(roots) or os.path.realpath(path).startswith(roots)


def user_file(path: str | None) -> bool:
    """A Python source file of the user's: neither the tool's nor a library's, nor a pseudo-file
    (`<string>`, `<eval_with_key>`)."""
    return bool(path) and path.endswith(".py") and not library_file(path) and not tool_file(path)


def torch_file(path: str) -> bool:
    return path.startswith(TORCH_DIR)


@functools.lru_cache(maxsize=1024)
def shown_library_file(shown: str) -> bool:
    """A path as reports show it (`diffusers/models/x.py`: site-packages cut off; the user's files
    relative to the working directory) that is a library's: its first folder is an installed package."""
    if library_file(shown):
        return True
    if os.path.isabs(shown) or os.path.exists(shown):  # a path of this machine, not a library's
        return False
    top = re.split(r"[\\/]", shown, maxsplit=1)[0]
    try:
        spec = importlib.util.find_spec(top) if top.isidentifier() else None
    except (ImportError, ValueError):
        return False
    return bool(spec and spec.origin and library_file(spec.origin))
