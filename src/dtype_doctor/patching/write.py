"""`--write`: apply a verified SourcePatch to the user's files, safely.

Refuses a file that changed since the run (its text is not the one the diff was made from) and,
unless `force`, a file this process may not write or one with uncommitted changes in git. Each file is first backed
up (`FILE.orig`, or `FILE.orig.1`, `.2`, ... when that exists: a backup is never overwritten, unless
`backup=False`; none for a file tracked and clean in git, whose backup git is; every backup whole
before any file is touched, or none), then rewritten in place: a symlink stays a link (its target is written), a hard link
stays linked (same inode), and the file keeps its encoding, BOM and line ends outside the edits. A
write that fails puts the old bytes back, in it and in the files written before it. No torch import.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass

from ..editing.git import git
from ..editing.source import python_encoding
from ..errors import DoctorError

MAX_BACKUPS = 1000


@dataclass(frozen=True)
class Written:
    """A file `--write` changed, and its backup (None with backup=False)."""

    path: str
    backup: str | None = None
    kept_read_only: bool = False  # its mode bits said read-only; written as root, the mode kept


def _git_status(path: str) -> str | None:
    """`git status --porcelain` of the file ('' clean and tracked, '??' untracked), None outside a
    git repository or without git."""
    out = git(
        os.path.dirname(os.path.abspath(path)),
        "status",
        "--porcelain",
        "--ignored",
        "--",
        os.path.basename(path),
    )
    return out.strip()[:2] if out is not None else None


def git_dirty(path: str) -> bool:
    """The file is tracked and has uncommitted changes in its git repository (False outside one,
    without git, or for a file git does not track: git holds no other copy of it to lose)."""
    status = _git_status(path)
    return bool(status) and status not in ("??", "!!")


def git_kept(path: str) -> bool:
    """The file is tracked and clean in git: git is its backup (`git checkout -- FILE` undoes a write)."""
    return _git_status(path) == ""


def read_only(path: str) -> bool:
    """This process may not write it, as the system answers (`os.access`): a user is refused a
    file without write permission for them; root, whom mode bits do not stop, is not (as `sed -i`,
    `cp` and editors' `:w!` write it). `marked_read_only` says when the mode bits alone forbid it."""
    try:
        return not os.access(path, os.W_OK)
    except OSError:
        return False


def marked_read_only(path: str) -> bool:
    """No write bit for anyone: written only because this process may (root); the mode is kept."""
    try:
        return not os.stat(path).st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
    except OSError:
        return False


def write_files(
    originals: dict[str, str], patched: dict[str, str], *, backup: bool = True, force: bool = False
) -> list[Written]:
    """Write `patched` (path -> text) over the files whose text is still `originals[path]`.

    Every file is checked before any is written: one refusal writes nothing (DoctorError, one line).
    """
    data: dict[str, tuple[bytes, bytes]] = {}  # path -> (bytes now, bytes patched)
    for path in patched:
        try:
            with open(path, "rb") as fh:
                raw = fh.read()
            encoding = python_encoding(raw)
            now = raw.decode(encoding)
        except OSError as exc:
            raise DoctorError(f"cannot read {path}: {exc.strerror or exc}") from None
        except (SyntaxError, UnicodeDecodeError):
            now, encoding = None, "utf-8"
        if now != originals[path]:
            raise DoctorError(f"{path} changed since the run: not written (run --diff again)")
        if not force and read_only(path):
            raise DoctorError(f"{path} is read-only: not written (give --force to write it anyway)")
        if not force and git_dirty(path):
            raise DoctorError(f"{path} has uncommitted changes in git: commit or stash them, or give --force")
        data[path] = (raw, patched[path].encode(encoding))
    saved: dict[str, str | None] = {}
    try:  # every backup whole before any file is touched: one that fails writes nothing
        for path, (old, _) in data.items():
            saved[path] = _backup(path, old) if backup and not git_kept(path) else None
    except DoctorError:
        _remove(saved.values())
        raise
    written: list[Written] = []
    for path, (old, new) in data.items():
        marked = marked_read_only(path)
        try:
            _rewrite(path, old, new)
        except DoctorError as exc:  # the files written before it get their old bytes back
            for done in written:
                with contextlib.suppress(DoctorError):
                    _rewrite(done.path, data[done.path][1], data[done.path][0])
            raise DoctorError(
                f"{exc}{'; the files written before it were put back' if written else ''}"
            ) from None
        written.append(Written(path, saved[path], marked))
    return written


def _backup(path: str, old: bytes) -> str:
    """`old` into the first free name of FILE.orig, FILE.orig.1, ... (never over one), whole or not
    at all: written and synced under a temporary name in the same folder first, then hard-linked to
    its name (exclusive, atomic); a full disk or an unwritable folder leaves no backup, empty or
    partial. Where the file system has no hard links, the name is made exclusively and removed again
    if the write fails."""
    folder, base = os.path.split(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{base}.orig.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise DoctorError(f"cannot write the backup {path}.orig: {exc.strerror or exc}") from None
    try:
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(old)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            raise DoctorError(f"cannot write the backup {path}.orig: {exc.strerror or exc}") from None
        with contextlib.suppress(OSError):
            shutil.copystat(path, tmp)
        for n in range(MAX_BACKUPS):
            name = f"{path}.orig" + (f".{n}" if n else "")
            try:
                os.link(tmp, name)
            except FileExistsError:
                continue
            except OSError:  # no hard links here
                if _exclusive_copy(name, old, path):
                    return name
                continue
            return name
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    raise DoctorError(f"{path}.orig .. .orig.{MAX_BACKUPS - 1} all exist: not written (remove some)")


def _exclusive_copy(name: str, old: bytes, path: str) -> bool:
    """`old` into a new file `name`: False when it exists; a failed write removes it again."""
    try:
        fh = open(name, "xb")  # noqa: SIM115 (removed below when the write fails)
    except FileExistsError:
        return False
    except OSError as exc:
        raise DoctorError(f"cannot write the backup {name}: {exc.strerror or exc}") from None
    try:
        with fh:
            fh.write(old)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(name)
        raise DoctorError(f"cannot write the backup {name}: {exc.strerror or exc}") from None
    with contextlib.suppress(OSError):
        shutil.copystat(path, name)
    return True


def _remove(backups: Iterable[str | None]) -> None:
    for name in backups:
        if name:
            with contextlib.suppress(OSError):
                os.unlink(name)


def _rewrite(path: str, old: bytes, new: bytes) -> None:
    """Write `new` into the file itself (through a symlink, same inode), lending the owner write
    permission for the moment when it lacks it (--force); on failure the old bytes go back."""
    real = os.path.realpath(path)
    mode = os.stat(real).st_mode
    lend = not mode & stat.S_IWUSR
    try:
        if lend:
            os.chmod(real, stat.S_IMODE(mode) | stat.S_IWUSR)
        try:
            _overwrite(real, new)
        except OSError:
            with contextlib.suppress(OSError):
                _overwrite(real, old)
            raise
    except OSError as exc:
        raise DoctorError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        if lend:
            with contextlib.suppress(OSError):
                os.chmod(real, stat.S_IMODE(mode))


def _overwrite(real: str, data: bytes) -> None:
    with open(real, "r+b") as fh:
        fh.write(data)
        fh.truncate()
        fh.flush()
        os.fsync(fh.fileno())
