"""`run`'s experiment: a failing program is re-run with each root cause's candidate edits until one
cures it, and that cure is the first fix everywhere: in the JSON as ruff-shaped edits (applied here by
scripts/fix_by_hand.py's few lines, which import nothing of the tool, then run under plain python),
as a diff on the console, as SARIF fixes, and as what `--write` writes."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cli_process import dtype_doctor

ROOT = Path(__file__).resolve().parents[1]
ZOO = ROOT / "tests" / "diff_zoo"
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")]),
    "OMP_NUM_THREADS": "1",
    "COLUMNS": "100",
}
ENV.pop("DTYPE_DOCTOR_BUDGET", None)  # the default budget, as a user has it


def _applier():
    spec = importlib.util.spec_from_file_location("fix_by_hand", ROOT / "scripts" / "fix_by_hand.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _first_fix(report: dict) -> dict:
    finding = next(f for f in report["findings"] if f["severity"] == "error")
    return finding["fixes"][0]


@pytest.fixture
def unet_case(tmp_path: Path) -> Path:
    shutil.copy(ZOO / "onetrainer_mask.py", tmp_path)
    return tmp_path / "onetrainer_mask.py"


@pytest.mark.slow  # ~40-50 s: run first (tests/conftest.py)
def test_the_cure_is_the_first_fix_in_json_console_sarif_and_note(unet_case: Path) -> None:
    cwd = unet_case.parent
    proc = dtype_doctor(
        "run",
        "--json=r.json",
        "--output",
        "sarif=r.sarif",
        "--output",
        "console",
        unet_case.name,
        cwd=cwd,
        env=ENV,
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    report = json.loads((cwd / "r.json").read_text())
    fix = _first_fix(report)
    assert fix["verified"] is True and fix["verification"].startswith("verified: these edits, re-run")
    assert report["meta"]["experiment"]["cured"] is True
    (edit,) = fix["edits"]
    assert Path(edit["filename"]).name == "onetrainer_mask.py"
    assert set(edit) == {"filename", "content", "location", "end_location"}
    assert edit["location"]["row"] == 11  # the latent_mask's birth, not the cat that failed
    assert "float16" in edit["content"]

    # applied by an applier that imports nothing of the tool, the script runs under plain python
    original = unet_case.read_text()
    _applier().apply_edits(cwd, fix["edits"])
    ran = subprocess.run([sys.executable, unet_case.name], cwd=cwd, env=ENV, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr[-1500:]
    patched = unet_case.read_text()
    assert patched != original

    # the console shows that same edit as a diff, the experiment's line, and the note is brief
    assert "-latent_mask = torch.ones(1, 1, 16, 16)" in proc.stderr
    assert "experiment " in proc.stderr and "cured by fix 1" in proc.stderr
    assert "in dtype-doctor's report below" in proc.stderr
    assert proc.stderr.count("fix 1  ") == 1  # the diagnosis once: not in the note and the box

    # SARIF carries it as a fix whose replacement is the edit's region
    sarif = json.loads((cwd / "r.sarif").read_text())
    result = next(r for r in sarif["runs"][0]["results"] if r["level"] == "error")
    (change,) = result["fixes"][0]["artifactChanges"]
    (replacement,) = change["replacements"]
    assert replacement["deletedRegion"]["startLine"] == edit["location"]["row"]
    assert replacement["insertedContent"]["text"] == edit["content"]

    # --write writes exactly the first fix's edits
    unet_case.write_text(original)
    wrote = dtype_doctor("run", "--write", "--no-backup", unet_case.name, cwd=cwd, env=ENV)
    assert wrote.returncode == 0, wrote.stderr[-1500:]
    assert unet_case.read_text() == patched


def test_budget_zero_runs_no_experiment_and_a_bad_budget_is_one_line(tmp_path: Path) -> None:
    shutil.copy(ZOO / "head_after_half.py", tmp_path)
    proc = dtype_doctor("run", "--budget", "0", "--json=r.json", "head_after_half.py", cwd=tmp_path, env=ENV)
    report = json.loads((tmp_path / "r.json").read_text())
    assert proc.returncode == 1 and "experiment" not in report["meta"]
    # a fix with a place still carries its edits (made by the paste, not run: labelled so)
    fix = _first_fix(report)
    assert fix["edits"] and not fix["verification"].startswith("verified: these edits")

    bad = dtype_doctor("run", "head_after_half.py", cwd=tmp_path, env={**ENV, "DTYPE_DOCTOR_BUDGET": "soon"})
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "dtype-doctor run: error: DTYPE_DOCTOR_BUDGET='soon' is not a number of seconds"
    ]


SILENT = """\
import torch

positions = torch.arange(4000, 4096, dtype=torch.float32)
inv_freq = 1.0 / (10000 ** (torch.arange(0, 8, 2).float() / 8))
with torch.autocast("cpu", dtype=torch.bfloat16):
    angles = positions[:, None] @ inv_freq[None, :]
    table = angles.float().cos()
reference = (positions[:, None] @ inv_freq[None, :]).cos()
err = (table - reference).abs().max().item()
print("max error", err)
assert err < 1e-2, f"cos table off by {err:.3f}"
"""


def test_a_silent_failure_is_rooted_at_the_line_whose_float32_cures_it(tmp_path: Path) -> None:
    """No dtype error, only the script's own assert: the line experiment bisects the user's
    low-precision lines and finds the matmul autocast lowered; its fix (autocast off there) is
    verified by a re-run and, applied by the independent applier, makes plain python pass."""
    (tmp_path / "rope.py").write_text(SILENT)
    proc = dtype_doctor("run", "--budget", "300", "--json=r.json", "rope.py", cwd=tmp_path, env=ENV)
    assert proc.returncode == 1 and "AssertionError" in proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    first = report["findings"][0]
    assert first["code"] == "low-precision-under-autocast"
    assert (first["location"]["file"], first["location"]["line"]) == ("rope.py", 6)
    fix = first["fixes"][0]
    assert fix["verified"] is True, fix["verification"]
    assert 'with torch.autocast(device_type="cpu", enabled=False):' in fix["diff"]
    _applier().apply_edits(tmp_path, fix["edits"])
    ran = subprocess.run([sys.executable, "rope.py"], cwd=tmp_path, env=ENV, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr[-1500:]
