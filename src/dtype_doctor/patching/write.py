"""`--write`: apply a verified SourcePatch to the user's files, safely.

Refuses a file that changed since the run (its text is not the one the diff was made from) and, in a
git repository, a file with uncommitted changes unless `force`; leaves `FILE.orig` unless
`backup=False`. Each file is replaced whole (write to a temporary file, then rename). No torch import.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess

from ..errors import DoctorError


def git_dirty(path: str) -> bool:
    """The file has uncommitted changes in its git repository (False outside one, or without git)."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        proc = subprocess.run(
            ["git", "status", "--porcelain", "--", os.path.basename(path)],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return proc.returncode == 0 and bool(proc.stdout.strip())


def write_files(
    originals: dict[str, str], patched: dict[str, str], *, backup: bool = True, force: bool = False
) -> list[str]:
    """Write `patched` (path -> text) over the files whose text is still `originals[path]`.

    Every file is checked before any is written: one refusal writes nothing (DoctorError, one line).
    """
    for path in patched:
        try:
            with open(path, encoding="utf-8", newline="") as fh:
                now = fh.read()
        except OSError as exc:
            raise DoctorError(f"cannot read {path}: {exc.strerror or exc}") from None
        if now != originals[path]:
            raise DoctorError(f"{path} changed since the run: not written (run --diff again)")
        if not force and git_dirty(path):
            raise DoctorError(f"{path} has uncommitted changes in git: commit or stash them, or give --force")
    written = []
    for path, text in patched.items():
        if backup:
            shutil.copy2(path, f"{path}.orig")
        tmp = f"{path}.tmp-{os.getpid()}"
        try:
            with open(tmp, "w", encoding="utf-8", newline="") as fh:
                fh.write(text)
            shutil.copymode(path, tmp)
            os.replace(tmp, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise DoctorError(f"cannot write {path}: {exc.strerror or exc}") from None
        written.append(path)
    return written
