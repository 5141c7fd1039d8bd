"""Which files are the user's: the only ones a fix may edit."""

from __future__ import annotations

import os

from ..tracing.files import user_file


def is_user_file(path: str | None) -> bool:
    """A Python file of the user's that exists (relative to the working directory or absolute)."""
    return user_file(path) and os.path.isfile(path or "")
