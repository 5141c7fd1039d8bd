"""Every fix shown carries a verification label (issue 29 item 4: "every shown fix carries a
label"): a fix no back-end of the verifier tried is "not verified (why)", on real reports of each
command (explain, run, check, numerics), read as the user reads them (the JSON output). The label
agrees with `verified`: "verified: ..." only when it is True, "fails: ..." only when False."""

from __future__ import annotations

import json
import re
from pathlib import Path

from cli_process import dtype_doctor
from dtype_doctor.cli import main

LABEL = re.compile(r"^(verified: |fails: |not verified \()")
MODELS = str(Path(__file__).parent / "numerics_models.py")

# an fp16 model whose forward promotes silently (a warning: nothing fails, nothing is replayed),
# then a float32 input into its fp16 Linear (an error: the first fixes are replayed)
SCRIPT = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.register_buffer("scale", torch.ones(8))

    def forward(self, x):
        return self.proj(x * self.scale.float())


model = Net().half()
model.scale = model.scale.float()
x = torch.randn(2, 8)
print(model(x).dtype)
"""

FACTORY = """\
import torch
from torch import nn


def build():
    model = nn.Sequential(nn.Linear(16, 16), nn.GELU(), nn.Linear(16, 4))
    model[2].half()
    return model
"""


def _fixes(report: dict) -> list[tuple[str, dict]]:
    fixes = [(f["code"], fix) for f in report["findings"] for fix in f["fixes"]]
    assert fixes, report["findings"]
    return fixes


def _labelled(report: dict) -> None:
    for code, fix in _fixes(report):
        text = fix["verification"]
        assert LABEL.match(text), (code, fix)
        assert (fix["verified"] is True) == text.startswith("verified: "), (code, fix)
        assert (fix["verified"] is False) == text.startswith("fails: "), (code, fix)


def test_explain_labels_every_fix_as_not_run(capsys) -> None:
    msg = "RuntimeError: expected mat1 and mat2 to have the same dtype, but got: float != c10::Half"
    assert main(["explain", msg, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    _labelled(report)
    assert all("explain only reads the error text" in fix["verification"] for _, fix in _fixes(report))


def test_run_labels_the_replayed_fixes_and_every_other_one(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    proc = dtype_doctor("run", "--json=r.json", "train.py", cwd=tmp_path)
    assert proc.returncode != 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "r.json").read_text())
    _labelled(report)
    assert any(fix["verified"] is True for _, fix in _fixes(report))  # the error's fix was replayed


def test_check_labels_the_dry_run_fixes_and_every_other_one(tmp_path: Path) -> None:
    (tmp_path / "factory.py").write_text(FACTORY)
    proc = dtype_doctor("check", "factory.py:build", "--input", "2x16", "--json=r.json", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-3000:]
    report = json.loads((tmp_path / "r.json").read_text())
    _labelled(report)
    assert any(fix["verified"] is True for _, fix in _fixes(report))


def test_numerics_labels_every_fix(capsys) -> None:
    args = ["--input", "1x3x16x16", "--dtype", "fp16", "--steps", "1", "--json"]
    assert main(["numerics", f"{MODELS}:make_vae", *args]) == 1
    _labelled(json.loads(capsys.readouterr().out))
