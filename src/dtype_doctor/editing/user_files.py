"""Which files are the user's: the only ones a fix may edit."""

from __future__ import annotations

import os
import sys
import sysconfig

_LIBRARY_ROOTS = tuple(
    os.path.realpath(p)
    for p in {sysconfig.get_paths().get(k, "") for k in ("purelib", "platlib", "stdlib")} | {sys.prefix}
    if p
)


def is_user_file(path: str | None) -> bool:
    """A Python file of the user's (relative to the working directory or absolute), not a library's."""
    if not path or not path.endswith(".py") or not os.path.isfile(path):
        return False
    real = os.path.realpath(path)
    here = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # dtype_doctor itself
    if real.startswith(here + os.sep) or "site-packages" in real or "dist-packages" in real:
        return False
    return not any(real.startswith(root + os.sep) for root in _LIBRARY_ROOTS if root != os.sep)
