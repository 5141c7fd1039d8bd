"""The patched-program re-run's process, isolated: a scratch working directory (where the user's
working directory sits in the scratch copy, else the scratch root), standard input from /dev/null,
its output captured (never shown after the user's own), no bytecode written next to the user's files,
and the guard (guard.py) installed by a `-c` bootstrap before the program's first line. No torch import.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

from . import warm
from .child_signals import own_children
from .guard import reason

_BOOT = "import sys; from dtype_doctor.verifying.guard import bootstrap; bootstrap(sys.argv[1], sys.argv[2], sys.argv[3:])"


@dataclass
class Ran:
    code: int
    stdout: str
    stderr: str
    stopped: str | None = None  # why the guard stopped it (guard.py), or None


def guarded(cmd: list[str], scratch: str) -> list[str]:
    """`python -m MODULE ARGS` as `python -c BOOT SCRATCH MODULE ARGS` (the guard first)."""
    if len(cmd) >= 3 and cmd[0] == sys.executable and cmd[1] == "-m":
        return [cmd[0], "-c", _BOOT, scratch, cmd[2], *cmd[3:]]
    return cmd


def workdir(scratch: str, anchor: str) -> str:
    """The user's working directory's place in the scratch copy of `anchor` (else the scratch root)."""
    here, anchor = os.path.realpath(os.getcwd()), os.path.realpath(anchor)
    if here == anchor or here.startswith(anchor + os.sep):
        place = os.path.join(scratch, os.path.relpath(here, anchor))
        os.makedirs(place, exist_ok=True)
        return place
    return scratch


def pythonpath(value: str, scratch: str, anchor: str) -> list[str]:
    """The user's PYTHONPATH for a re-run whose working directory is in `scratch`: a relative (or
    empty) entry meant the user's working directory, so it is made absolute against it; an entry
    inside `anchor` goes first as its scratch copy (the patched files), then as itself (what the
    copy left out)."""
    here, anchor = os.getcwd(), os.path.realpath(anchor)
    out: list[str] = []
    for entry in value.split(os.pathsep) if value else []:
        path = os.path.abspath(os.path.join(here, entry or os.curdir))
        real = os.path.realpath(path)
        if real == anchor or real.startswith(anchor + os.sep):
            copy = os.path.normpath(os.path.join(scratch, os.path.relpath(real, anchor)))
            if os.path.isdir(copy):
                out.append(copy)
        out.append(path)
    return out


def run(cmd: list[str], scratch: str, anchor: str, env: dict[str, str], timeout: float | None) -> Ran:
    """Run `cmd` isolated in `scratch`; code 124 when it did not finish within `timeout`. A
    `python -m` command is forked from this process's warm zygote (warm.py) when it serves."""
    with own_children():
        return _run(cmd, scratch, anchor, env, timeout)


def _run(cmd: list[str], scratch: str, anchor: str, env: dict[str, str], timeout: float | None) -> Ran:
    env = {**env, "PYTHONDONTWRITEBYTECODE": "1", "TMPDIR": scratch}
    command, cwd = guarded(cmd, scratch), workdir(scratch, anchor)
    if command is not cmd:
        z = warm.zygote(anchor, scratch, env)
        done = z.run(command, cwd, env, timeout) if z is not None else None
        if done is not None:
            code, out, err = done
            if code == 124:
                return Ran(124, "", "the replay timed out")
            return Ran(code, out, err, reason(err))
    try:
        proc = subprocess.run(
            command,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return Ran(124, "", "the replay timed out")
    return Ran(proc.returncode, proc.stdout or "", proc.stderr or "", reason(proc.stderr or ""))
