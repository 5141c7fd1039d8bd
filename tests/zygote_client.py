"""`dtype-doctor ARGS` for a README command (tests/test_readme.py): asked of the test worker's warm
zygote through the Unix socket `$DTYPE_DOCTOR_TEST_SERVER` (cli_process.serve_commands), its exit
code and output given back as the command's own; stderr into stdout when the two are one file
(`2>&1`). Cold (`python -m dtype_doctor`) when standard input is a pipe or a file, with no server,
or when the zygote does not serve. Standard library only: no torch import here."""

from __future__ import annotations

import json
import os
import socket
import stat
import sys


def _cold() -> None:
    os.execv(sys.executable, [sys.executable, "-m", "dtype_doctor", *sys.argv[1:]])


def main() -> int:
    where = os.environ.get("DTYPE_DOCTOR_TEST_SERVER")
    mode = os.fstat(0).st_mode
    if not where or stat.S_ISFIFO(mode) or stat.S_ISREG(mode):
        _cold()
    ask = {
        "argv": sys.argv[1:],
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "merged": os.path.samestat(os.fstat(1), os.fstat(2)),
    }
    try:
        with socket.socket(socket.AF_UNIX) as conn:
            conn.connect(where)
            conn.sendall(json.dumps(ask).encode() + b"\n")
            data = b"".join(iter(lambda: conn.recv(65536), b""))
        reply = json.loads(data)
    except (OSError, ValueError):
        _cold()
    if reply.get("cold"):
        _cold()
    sys.stdout.write(reply["out"])
    sys.stdout.flush()
    sys.stderr.write(reply["err"])
    sys.stderr.flush()
    return int(reply["code"])


if __name__ == "__main__":
    sys.exit(main())
