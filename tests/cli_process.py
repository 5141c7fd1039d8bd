"""`python -m dtype_doctor ARGS` in a child process, as a user's shell runs it (one thread).

A plain call (no standard input, text output, no other Popen option) is forked from a warm process
that has imported torch and NumPy once per test worker (the tool's own zygote, verifying/warm.py,
the one its re-runs use): the child starts at `python -m dtype_doctor` with the call's working
directory, environment and `sys.path`, and pays no torch import (~3 s a call on the 2-core CI
machine, most of a small `run`). A forked call past its timeout is killed and ends with exit 124
(a cold one raises subprocess.TimeoutExpired). `DTYPE_DOCTOR_TESTS_COLD` set, or any other call: a
fresh interpreter, as before.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
SRC = str(Path(__file__).resolve().parents[1] / "src")
_BOOT = "import runpy; runpy.run_module('dtype_doctor', run_name='__main__', alter_sys=True)"
_PRELOAD = [
    "numpy",
    "torch",
    "rich.console",
    # the model libraries the zoo scripts build from (tests/tiny_models.py): several seconds a run
    "diffusers.models.unets.unet_2d_condition",
    "diffusers.models.autoencoders.autoencoder_kl",
    "transformers.models.llama.modeling_llama",
    "transformers.models.gpt2.modeling_gpt2",
    "transformers.models.clip.modeling_clip",
    "transformers.models.vit.modeling_vit",
]
_warm: list[Any] = []
_one_at_a_time = threading.Lock()


def _zygote() -> Any:
    """This test process's warm zygote (started on first use), or None where there is none."""
    if os.environ.get("DTYPE_DOCTOR_TESTS_COLD") or not hasattr(os, "fork") or sys.platform == "darwin":
        return None
    if not _warm:
        from dtype_doctor.verifying.warm import Zygote

        base = {**os.environ, "OMP_NUM_THREADS": "1"}
        base["PYTHONPATH"] = os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH", "")) if p)
        try:
            _warm.append(Zygote(_PRELOAD, base))
        except OSError:
            _warm.append(None)
        else:
            atexit.register(_warm[0].close)
    return _warm[0]


def forked(
    argv: list[str], cwd: Any, env: dict[str, str] | None, timeout: float, merged: bool = False
) -> subprocess.CompletedProcess | None:
    """`python ARGV` (`-m dtype_doctor ...` or `SCRIPT ...`) forked from the warm zygote; None when
    it does not serve or ARGV is anything else (`-c`, another module): the caller runs it cold.
    `merged`: stderr into stdout, as `2>&1`."""
    if argv[:2] == ["-m", "dtype_doctor"]:
        code, rest = _BOOT, argv[2:]
    elif argv and not argv[0].startswith("-"):
        code, rest = f"import runpy; runpy.run_path({argv[0]!r}, run_name='__main__')", argv[1:]
    else:
        return None
    where = os.path.abspath(cwd) if cwd is not None else os.getcwd()
    with _one_at_a_time:  # the zygote answers one request at a time
        z = _zygote()
        done = (
            z.run([sys.executable, "-c", code, *rest], where, dict(env or ENV), timeout, merged)
            if z
            else None
        )
    if done is None:
        return None
    status, out, err = done
    return subprocess.CompletedProcess([sys.executable, *argv], status, out, err)


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
    if stdin is None and text and not popen:
        done = forked(["-m", "dtype_doctor", *args], cwd, env, timeout)
        if done is not None:
            return done
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


def python(
    cmd: list[str], cwd: Any = None, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """`subprocess.run(cmd, capture_output=True, text=True)` for `cmd` = [sys.executable, "-m",
    "dtype_doctor", ...] or [sys.executable, SCRIPT, ...]: forked warm when it can be."""
    if cmd[:1] == [sys.executable]:
        done = forked(cmd[1:], cwd, env, timeout)
        if done is not None:
            return done
    return subprocess.run(cmd, cwd=cwd, env=env or ENV, capture_output=True, text=True, timeout=timeout)


def serve_commands(path: str) -> Any:
    """A thread answering `tests/zygote_client.py` on the Unix socket `path`: each connection one
    `dtype-doctor ARGS` forked as `forked` does (`{"code", "out", "err"}`, or `{"cold": true}` when
    the zygote does not serve). Returns a function that stops it."""
    import json
    import socket

    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(4)

    def answer(conn: Any) -> None:
        with conn:
            data = b""
            while not data.endswith(b"\n"):
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            ask = json.loads(data)
            done = forked(["-m", "dtype_doctor", *ask["argv"]], ask["cwd"], ask["env"], 300, ask["merged"])
            reply = (
                {"cold": True}
                if done is None
                else {"code": done.returncode, "out": done.stdout, "err": done.stderr}
            )
            conn.sendall(json.dumps(reply).encode())

    def loop() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=answer, args=(conn,), daemon=True).start()

    threading.Thread(target=loop, daemon=True).start()

    def stop() -> None:
        server.close()

    return stop


def fix_by_hand() -> Any:
    """scripts/fix_by_hand.py, the independent applier of a fix's edits (imports nothing of the tool)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "fix_by_hand", Path(SRC).parent / "scripts" / "fix_by_hand.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_write(folder: Path, text: str, env: dict[str, str]) -> tuple[Path, dict, subprocess.CompletedProcess]:
    """`text` as folder/script.py, then `dtype-doctor run --write --no-backup` on it with a JSON report:
    (the script, the report, the finished process)."""
    import json

    script = folder / "script.py"
    script.write_text(text)
    cmd = [sys.executable, "-m", "dtype_doctor", "run", "--write", "--no-backup", "--no-color"]
    cmd += ["--output-format", "json", "--output-file", "report.json", script.name]
    proc = python(cmd, cwd=folder, env=env, timeout=600)
    return script, json.loads((folder / "report.json").read_text()), proc
