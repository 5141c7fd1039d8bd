"""Asking git about the user's files: one subprocess call, None outside a repository or without git."""

from __future__ import annotations

import subprocess

from ..verifying.child_signals import own_children


def git(folder: str, *args: str) -> str | None:
    """`git ARGS` run in `folder`: its standard output, or None when it fails or git is missing."""
    try:
        with own_children():  # its end is the tool's: never the program's SIGCHLD handler's
            proc = subprocess.run(
                ["git", *args], cwd=folder, capture_output=True, text=True, timeout=30, check=False
            )
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None
