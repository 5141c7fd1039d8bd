"""`python -m dtype_doctor ARGS` in a child process, as a user's shell runs it (one thread)."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def dtype_doctor(
    *args: str,
    cwd: Any = None,
    env: dict[str, str] | None = None,
    stdin: Any = None,
    text: bool = True,
    timeout: float = 300,
    **popen: Any,
) -> subprocess.CompletedProcess:
    """The finished process, stdout and stderr captured (text unless `text=False`)."""
    return subprocess.run(
        [sys.executable, "-m", "dtype_doctor", *args],
        input=stdin,
        capture_output=True,
        text=text,
        env=env or ENV,
        cwd=cwd,
        timeout=timeout,
        **popen,
    )
