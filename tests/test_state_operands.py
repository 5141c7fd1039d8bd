"""A recurrent cell's state is an operand too: `lstm_cell(x, (h, c))` names the float32 `h` and `c`
inside the tuple (with the line that made them), and the first fix makes them where they are born in
the dtype of the tensor whose device the factory already follows (`device=x.device` → `dtype=x.dtype`),
verified by a re-run; applied by the independent applier, the script runs clean under python and
after `model.float()` too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from cli_process import dtype_doctor, fix_by_hand

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
ENV.pop("DTYPE_DOCTOR_BUDGET", None)

DECODER = """import torch
from torch import nn


class Decoder(nn.Module):
    def __init__(self, units=16):
        super().__init__()
        self.cell = nn.LSTMCell(units, units)
        self.out = nn.Linear(units, 4)

    def forward(self, x):
        h = c = torch.zeros(x.size(0), x.size(1), device=x.device)
        for _ in range(3):
            h, c = self.cell(x, (h, c))
        return self.out(h)


model = Decoder().half()
print(model(torch.randn(2, 16, dtype=torch.float16)).dtype)
print(model.float()(torch.randn(2, 16)).dtype)
"""


def test_a_cells_state_is_named_and_made_in_the_datas_dtype(tmp_path: Path) -> None:
    (tmp_path / "prog.py").write_text(DECODER)
    proc = dtype_doctor("run", "--json=r.json", "prog.py", cwd=tmp_path, env=ENV)
    assert proc.returncode == 1, proc.stderr[-2000:]
    first = json.loads((tmp_path / "r.json").read_text())["findings"][0]
    state = {o["role"]: o for o in first["operands"]}
    for role in ("operand1[0]", "operand1[1]"):
        assert state[role]["dtype"] == "float32" and state[role]["origin"]["line"] == 12, first["operands"]
    fix = first["fixes"][0]
    assert fix["verified"] is True, fix["verification"]
    fix_by_hand().apply_edits(tmp_path, fix["edits"])
    assert "device=x.device, dtype=x.dtype)" in (tmp_path / "prog.py").read_text()
    ran = subprocess.run([sys.executable, "prog.py"], cwd=tmp_path, env=ENV, capture_output=True, text=True)
    assert ran.returncode == 0 and ran.stdout == "torch.float16\ntorch.float32\n", ran.stderr[-1500:]
