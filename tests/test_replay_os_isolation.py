"""Issue 42 H6/H7: a replay (a forked child of the user's program that re-runs the failing call with
a fix) cannot write through what the program opened (a logging FileHandler, a raw descriptor) nor
change its shared memory (an np.memmap file, a `share_memory_()` tensor): the files hold what plain
python leaves, and the fix is still verified."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

from cli_process import ENV as BASE
from cli_process import dtype_doctor

ENV = {k: v for k, v in BASE.items() if k != "DTYPE_DOCTOR_BUDGET"}  # the experiment and its replays run

PROGRAM = """
import logging
import os
import numpy as np
import torch
from torch import nn

log = logging.getLogger("train")
log.addHandler(logging.FileHandler("log.txt"))
log.setLevel(logging.INFO)
raw = os.open("raw.txt", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
counter = torch.zeros(1).share_memory_()
mm = np.memmap("mm.bin", dtype=np.float32, mode="w+", shape=(1,))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4).half()

    def forward(self, x):
        log.info("forward")
        os.write(raw, b"forward\\n")
        counter.add_(1)
        mm[0] += 1
        mm.flush()
        return self.b(self.a(x))


try:
    Net()(torch.randn(2, 4))
except RuntimeError as e:
    print("error:", str(e)[:40])
"""


def _files(folder: Path) -> tuple[str, str, float]:
    mm = struct.unpack("f", (folder / "mm.bin").read_bytes()[:4])[0]
    return (folder / "log.txt").read_text(), (folder / "raw.txt").read_text(), mm


def test_a_replay_leaves_the_programs_files_and_shared_memory_alone(tmp_path: Path) -> None:
    (tmp_path / "prog.py").write_text(PROGRAM)
    plain = subprocess.run(
        [sys.executable, "prog.py"], cwd=tmp_path, env=ENV, capture_output=True, timeout=120
    )
    assert plain.returncode == 0, plain.stderr[-1500:]
    expected = _files(tmp_path)
    assert expected == ("forward\n", "forward\n", 1.0)
    for name in ("log.txt", "raw.txt", "mm.bin"):
        (tmp_path / name).unlink()
    run = dtype_doctor("run", "--json=r.json", "prog.py", cwd=tmp_path, env=ENV)
    fix = json.loads((tmp_path / "r.json").read_text())["findings"][0]["fixes"][0]
    assert "replayed on copies" in fix["verification"], run.stderr[-3000:]  # the forward was replayed
    assert _files(tmp_path) == expected
