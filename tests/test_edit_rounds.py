"""A program that fails twice over is fixed in rounds (patching/chain.py): the first round's edit
cures the first dtype error, the re-run dies of a second one further on, and the next round is
planned from that re-run's report on the text the first round left. Narrow edits (and chains of
them) are tried before the whole model in float32; a snippet that only asserts, or passes `...`
to a call, or would make a global a function's unbound local, is never pasted. Every patch made
here is executed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from cli_process import python  # type: ignore[import-not-found]
from dtype_doctor.editing.fix_edits import apply_json, between, shown_path
from dtype_doctor.patching.shown import not_a_cure
from dtype_doctor.patching.verify import scratch_to_user
from dtype_doctor.remedies.scope import unbound_at

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}

# a float32 input into a bfloat16 model, then (once that is cured) float32 counts added into the
# model's bfloat16 totals: two independent causes, the second reached only after the first is fixed
TWO_FAILURES = """\
import torch
from torch import nn


class Scorer(nn.Module):
    def __init__(self, width=16, classes=4):
        super().__init__()
        self.body = nn.Linear(width, width)
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        return self.head(torch.relu(self.body(x)))


def tally(scores, labels, classes=4):
    totals = torch.zeros(classes, scores.shape[-1], dtype=scores.dtype)
    counts = torch.ones(labels.shape[0], scores.shape[-1])
    totals.index_add_(0, labels, scores)
    return totals.index_add_(0, labels, counts)


net = Scorer().to(torch.bfloat16)
features = torch.randn(8, 16)
labels = torch.randint(0, 4, (8,))
print(tally(net(features), labels).float().sum().item())
"""

# a rotary table kept in float32 on purpose: the rotated half is concatenated with the bfloat16
# half (a float32 island) and the result cast back before the block returns: a correct program
ROTARY_ISLAND = """\
import torch
from torch import nn


class Rotary(nn.Module):
    def __init__(self, width=16, rotated=8, steps=32):
        super().__init__()
        self.proj = nn.Linear(width, width)
        self.rotated = rotated
        angles = torch.arange(steps).float()[:, None] / (100 ** (torch.arange(rotated).float() / rotated))
        self.table = angles.cos()  # plain attribute: stays float32 through .to(bfloat16)

    def forward(self, h):
        q = self.proj(h)
        q_rot, q_pass = q[..., : self.rotated], q[..., self.rotated :]
        q = torch.cat([q_rot * self.table[: h.shape[1]], q_pass], dim=-1)
        return q.to(h.dtype)


block = Rotary().to(torch.bfloat16)
print(block(torch.randn(2, 6, 16, dtype=torch.bfloat16)).dtype)
"""


def _run(tmp_path: Path, name: str, text: str, *flags: str) -> tuple[Path, subprocess.CompletedProcess]:
    script = tmp_path / name
    script.write_text(text)
    cmd = [sys.executable, "-m", "dtype_doctor", "run", "--no-color", *flags, name]
    return script, python(cmd, cwd=tmp_path, env=ENV, timeout=600)


def test_two_failures_are_fixed_in_two_rounds_with_narrow_edits(tmp_path: Path) -> None:
    script, proc = _run(tmp_path, "tally.py", TWO_FAILURES, "--diff", "--json=report.json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    patch = next(s for s in report["sections"] if s.get("diff"))
    assert patch["verified"] is True, patch["outcome"]
    assert "in 2 rounds" in patch["outcome"]
    # each cause edited where its tensor is made; the model is not made float32
    assert "+features = torch.randn(8, 16, dtype=torch.bfloat16)" in proc.stdout
    assert "counts = torch.ones(labels.shape[0], scores.shape[-1], dtype=torch.bfloat16)" in proc.stdout
    assert ".float()" not in "".join(line for line in proc.stdout.splitlines() if line.startswith("+"))
    # the cure's edits are one set on the file as it was: applied to it, the program runs
    cure = report["findings"][0]["fixes"][0]
    assert cure["verified"] is True
    fixed = apply_json(TWO_FAILURES, cure["edits"])
    script.write_text(fixed)
    ran = python([sys.executable, script.name], cwd=tmp_path, env=ENV, timeout=300)
    assert ran.returncode == 0, ran.stderr[-2000:]


def test_write_applies_both_rounds(tmp_path: Path) -> None:
    script, proc = _run(tmp_path, "tally.py", TWO_FAILURES, "--write", "--no-backup")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert script.read_text() != TWO_FAILURES
    ran = python([sys.executable, script.name], cwd=tmp_path, env=ENV, timeout=300)
    assert ran.returncode == 0, ran.stderr[-2000:]


def test_a_float32_island_inside_cat_that_is_cast_back_is_not_reported(tmp_path: Path) -> None:
    _, proc = _run(tmp_path, "rotary.py", ROTARY_ISLAND, "--json=report.json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    findings = json.loads((tmp_path / "report.json").read_text())["findings"]
    assert [f["code"] for f in findings if f["severity"] in ("error", "warning")] == []
    # leaking it out of the block is reported, at the concatenation
    leaky = ROTARY_ISLAND.replace("return q.to(h.dtype)", "return q")
    _, proc = _run(tmp_path, "leaky.py", leaky, "--json=leaky.json")
    findings = json.loads((tmp_path / "leaky.json").read_text())["findings"]
    cat = [f for f in findings if f["severity"] == "warning" and f["location"]["op"] == "torch.cat"]
    assert cat and cat[0]["code"] == "silent-promotion" and cat[0]["location"]["line"] == 16


def test_a_check_or_a_shape_of_code_is_not_a_cure() -> None:
    assert not_a_cure('assert x.dtype == torch.bfloat16, f"{x.dtype} reaches body"')
    assert not_a_cure("x = torch.zeros(..., dtype=torch.float32)")
    assert not_a_cure("x = torch.zeros(8, dtype=...)")
    assert not not_a_cure("y = x[..., 0].to(torch.float16)")
    assert not not_a_cure("assert x.ndim == 2\nx = x.half()")


def test_a_global_reassigned_inside_a_function_is_never_pasted_there(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_text(
        "import torch\n"
        "model = torch.nn.Linear(2, 2)\n"
        "def step(x):\n"
        "    y = x * 2\n"
        "    return model(y)\n"
        "def other(model):\n"
        "    return model\n"
    )
    assert unbound_at(str(path), 4, "model = model.float()") == ("model", "step")  # UnboundLocalError
    # a parameter of the function, the module level, or a name the snippet binds before it reads it
    assert unbound_at(str(path), 7, "model = model.float()") is None
    assert unbound_at(str(path), 2, "model = model.float()") is None
    assert unbound_at(str(path), 4, "for p in model.parameters():\n    p.data = p.data.float()") is None


def test_edits_made_in_rounds_are_one_set_on_the_first_text() -> None:
    first = "a = 1\nb = a + 1\nprint(b)\n"
    once = "a = 1\nb = a + 1\nb = float(b)\nprint(b)\n"
    twice = "a = 2\nb = a + 1\nb = float(b)\nprint(b)\n"
    for after in (once, twice, "", "a = 1\n"):
        assert apply_json(first, between("/x.py", first, after)) == after


def test_the_rerun_places_are_the_users_files(tmp_path: Path) -> None:
    scratch, anchor = tmp_path / "scratch", tmp_path / "project"
    (scratch / "pkg").mkdir(parents=True)
    (scratch / "pkg" / "model.py").write_text("")
    (scratch / "_abs" / "opt" / "lib").mkdir(parents=True)
    (scratch / "_abs" / "opt" / "lib" / "helper.py").write_text("")
    back = scratch_to_user(str(scratch), str(scratch), str(anchor))
    assert back(str(scratch / "pkg" / "model.py")) == shown_path(str(anchor / "pkg" / "model.py"))
    assert back(os.path.join("pkg", "model.py")) == shown_path(str(anchor / "pkg" / "model.py"))
    assert back(str(scratch / "_abs" / "opt" / "lib" / "helper.py")) == "/opt/lib/helper.py"
    assert back("torch/nn/functional.py") == "torch/nn/functional.py"  # not a copied file: kept
