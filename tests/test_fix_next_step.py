"""A first fix must hold past the call it was seen to fail at (issue 29, item 4): the next
iteration of a loop, the next layer of the model. Each case runs `dtype-doctor run` on a small
program of our own, pastes the first fix of the first finding where it says (the package's paste
rule, as a user reads "at FILE:LINE"), and runs the patched program with plain python."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from dtype_doctor.patching.paste import paste

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}


def _first_fix(tmp_path: Path, name: str, source: str) -> tuple[dict, dict]:
    """(the first error, else warning, finding; its first fix with code), from `run --json`."""
    (tmp_path / name).write_text(textwrap.dedent(source))
    cmd = [sys.executable, "-m", "dtype_doctor", "run", "--json", "out.json", name]
    subprocess.run(cmd, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=600)
    findings = json.loads((tmp_path / "out.json").read_text())["findings"]
    finding = next(f for sev in ("error", "warning") for f in findings if f["severity"] == sev)
    fix = next(x for x in finding["fixes"] if x["snippet"] and not x["snippet"].lstrip().startswith("#"))
    return finding, fix


def _runs_pasted(tmp_path: Path, name: str, fix: dict) -> None:
    """The fix pasted at the place it states; the patched program runs to its end."""
    assert fix["file"] == name and fix["line"], fix
    patched = tmp_path / f"patched_{name}"
    patched.write_text(paste((tmp_path / name).read_text(), fix["line"], fix["snippet"]))
    proc = subprocess.run(
        [sys.executable, patched.name], cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, (fix, patched.read_text(), proc.stderr[-1500:])


LOOP = """\
    import torch
    from torch import nn


    class Pool(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(4, 4)
            self.norm = nn.LayerNorm(4)

        def forward(self, feats, groups):
            h = self.proj(feats)
            for _ in range(2):
                msg = self.proj(feats)
                h = h.new_zeros(h.shape).index_add_(0, groups, msg)
                h = self.norm(h.float())
            return h


    pool = Pool()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = pool(torch.randn(3, 4), torch.tensor([0, 1, 0]))
    print(out.dtype)
"""


def test_a_destination_whose_dtype_changes_in_a_loop_is_matched_by_its_own_dtype(tmp_path: Path) -> None:
    # iteration 1 writes bfloat16 into bfloat16; iteration 2 into the float32 the norm returned: a
    # cast to the dtype seen at the failure (float32) would fail at iteration 1
    finding, fix = _first_fix(tmp_path, "pool.py", LOOP)
    assert finding["code"] == "index-put-dtype-mismatch"
    assert fix["snippet"] == "msg = msg.to(h.dtype)" and fix["line"] == 15, fix
    assert "inside the replayed call" in fix["verification"]  # pasted in forward: not replayed at the call
    _runs_pasted(tmp_path, "pool.py", fix)
