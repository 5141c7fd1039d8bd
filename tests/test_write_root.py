"""`run --write` puts the edit at the root and leaves a script that runs: a plain tensor attribute a
module-wide cast skipped becomes a buffer where it is set (its fp32 maths is not lowered), a module
conversion goes where the model exists (inside `if __name__ == "__main__":`), never inside forward,
and a Python list is never given `.to`. Every edit made here is executed."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from cli_process import python  # type: ignore[import-not-found]
from dtype_doctor.editing import finders as find
from dtype_doctor.editing.source import Source, apply, castable
from dtype_doctor.patching.plan import Planner
from dtype_doctor.report import Finding, Operand, Origin, Report

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}

ATTRIBUTE_TABLE = """\
import torch
from torch import nn


def angle_table(steps, width):
    where = torch.arange(steps, dtype=torch.float32)[:, None]
    rate = torch.exp(-torch.arange(0, width, 2, dtype=torch.float32) / width)[None]
    return torch.cat([(where * rate).sin(), (where * rate).cos()], dim=-1)


class Mixer(nn.Module):
    def __init__(self, steps=8, width=16):
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.angles = angle_table(steps, width)  # kept as a plain attribute

    def forward(self, h):
        return self.fc(h + self.angles)


net = Mixer().to(torch.bfloat16)
h = torch.randn(2, 8, 16, dtype=torch.bfloat16)
print(net(h).float().sum().item())
"""

GUARDED_HEAD = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(8, 8)
        self.classifier = nn.Identity()

    def forward(self, x):
        return self.classifier(self.trunk(x))


if __name__ == "__main__":
    spare = {"cls": nn.Linear(8, 3)}
    net = Net().half()
    net.classifier = spare["cls"]
    x = torch.randn(4, 8, dtype=torch.float16)
    with torch.no_grad():
        print(net(x).shape)
"""


WIDE_REGION = """\
import torch
from torch import nn


class Pool(nn.Module):
    def __init__(self, width=16):
        super().__init__()
        self.proj = nn.Linear(width, width)

    def forward(self, tokens):
        wide = tokens.float()  # similarity in float32 on purpose
        affinity = (wide @ wide.transpose(-1, -2)).softmax(-1)
        pooled = affinity @ wide
        return self.proj(pooled)


pool = Pool().to(torch.bfloat16)
tokens = torch.randn(2, 5, 16, dtype=torch.bfloat16)
print(pool(tokens).shape)
"""


CLASS_WEIGHTS = """\
import numpy as np
import torch
from torch import nn

freq = np.array([40.0, 25.0, 10.0])
balance = freq.sum() / (3 * freq)  # numpy float64
scorer = nn.Sequential(nn.Linear(6, 3), nn.LogSoftmax(-1))
nll = nn.NLLLoss(weight=torch.tensor(balance))
feats, gold = torch.randn(5, 6), torch.tensor([0, 1, 2, 1, 0])
nll(scorer(feats), gold).backward()
print("ok")
"""


def _write(tmp_path: Path, name: str, text: str) -> tuple[Path, subprocess.CompletedProcess]:
    script = tmp_path / name
    script.write_text(text)
    cmd = [sys.executable, "-m", "dtype_doctor", "run", "--write", "--no-backup", "--no-color", name]
    proc = python(cmd, cwd=tmp_path, env=ENV, timeout=600)
    return script, proc


def _runs_clean(script: Path) -> None:
    proc = python([sys.executable, script.name], cwd=script.parent, env=ENV, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_a_plain_attribute_becomes_a_buffer_where_it_is_set(tmp_path: Path) -> None:
    script, proc = _write(tmp_path, "mixer.py", ATTRIBUTE_TABLE)
    assert proc.returncode == 0, proc.stderr[-3000:]
    after = script.read_text()
    assert (
        '        self.register_buffer("angles", angle_table(steps, width), persistent=False)'
        "  # kept as a plain attribute\n" in after
    )
    assert "register `angles` as a buffer where it is set (mixer.py:15)" in " ".join(proc.stderr.split())
    # the table's own float32 maths is deliberate: not lowered
    table = ATTRIBUTE_TABLE[: ATTRIBUTE_TABLE.index("class Mixer")]
    assert after.startswith(table)
    _runs_clean(script)


def test_a_module_conversion_goes_where_the_model_exists(tmp_path: Path) -> None:
    script, proc = _write(tmp_path, "guarded.py", GUARDED_HEAD)
    assert proc.returncode == 0, proc.stderr[-3000:]
    after = script.read_text().splitlines()
    added = after.index("    net.classifier.to(torch.float16)")
    assert after.index('if __name__ == "__main__":') < after.index("    net = Net().half()") < added
    _runs_clean(script)


def test_a_region_kept_wide_on_purpose_is_cast_back_where_it_leaves(tmp_path: Path) -> None:
    script, proc = _write(tmp_path, "pool.py", WIDE_REGION)
    assert proc.returncode == 0, proc.stderr[-3000:]
    after = script.read_text()
    said = " ".join(proc.stderr.split())
    # the shown first fix (the model loaded in float32, verified) where it states, else the cast where
    # the region's result is last assigned: never the deliberate upcast lowered
    shown = (
        "pool = pool.float()" in after and "Load the model in float32 if memory allows (pool.py:18)" in said
    )
    at_exit = "        pooled = (affinity @ wide).to(torch.bfloat16)\n" in after
    assert shown or (at_exit and "cast `pooled` to bfloat16 where it is last assigned" in said), said
    assert "        wide = tokens.float()  # similarity in float32 on purpose\n" in after
    _runs_clean(script)


def test_a_float64_weight_is_made_float32_where_it_is_made(tmp_path: Path) -> None:
    script, proc = _write(tmp_path, "weights.py", CLASS_WEIGHTS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "nll = nn.NLLLoss(weight=torch.tensor(balance, dtype=torch.float32))\n" in script.read_text()
    _runs_clean(script)


def _exec(text: str) -> dict:
    scope: dict = {"__name__": "__main__"}
    exec(compile(text, "edited.py", "exec"), scope)  # the edited program runs
    return scope


def test_an_insertion_never_reads_a_name_made_below_it() -> None:
    src = Source(
        "edited.py",
        textwrap.dedent(
            """\
            import torch
            from torch import nn

            if __name__ == "__main__":
                model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2)).half()
                model[1].float()
                with torch.no_grad():
                    out = model(torch.ones(1, 4, dtype=torch.float16))
            """
        ),
    )
    edit = find.insert_before(src, 8, "model[1].to(torch.float16)")
    text = apply(src.text, [edit])
    assert "    model[1].to(torch.float16)\n    with torch.no_grad():" in text
    assert _exec(text)["out"].dtype == torch.float16
    # at module level with the model made above: before the statement, at its indent
    flat = Source("flat.py", "import torch\nm = torch.nn.Linear(2, 2)\ny = m(torch.ones(2))\n")
    assert apply(flat.text, [find.insert_before(flat, 3, "m.to(torch.float16)")]).splitlines()[2] == (
        "m.to(torch.float16)"
    )


def _finding(operands: list[Operand], your_code: str) -> Report:
    data = {"expected_dtype": "float16", "your_code": your_code}
    return Report(findings=[Finding("matmul-dtype-mismatch", "mismatch", operands=operands, data=data)])


PAIR = """\
import torch
from torch import nn


class Pair(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Linear(4, 4).half()

    def forward(self, parts):
        return self.inner(parts[0])


parts = [torch.ones(1, 4), torch.ones(1, 4)]
pair = Pair()
out = pair(parts)
"""


def test_no_cast_on_a_list_and_no_module_cast_inside_forward(tmp_path: Path) -> None:
    path = tmp_path / "pair.py"
    path.write_text(PAIR)
    planner = Planner(lambda p: p == str(path))
    given = Origin(kind="input", name="parts", op="Pair.forward", file=str(path), line=16, dtype="float32")
    report = _finding([Operand("input", "float32", origin=given), Operand("weight", "float16")], f"{path}:16")
    edits = [e.text for cause in planner.plan(report) for cand in cause.candidates for e in cand.edits]
    assert not any(".to(" in t for t in edits), edits
    # a module reached only from forward: no conversion is inserted into forward
    inner = Origin(kind="parameter", name="inner.weight", module="inner", file=str(path), line=8)
    report = _finding([Operand("weight", "float32", origin=inner), Operand("input", "float16")], f"{path}:11")
    texts = [(e.start, e.text) for c in planner.plan(report) for cand in c.candidates for e in cand.edits]
    forward = (PAIR.index("    def forward"), PAIR.index("\n\n\nparts"))
    assert not [t for start, t in texts if forward[0] <= start <= forward[1]], texts


@pytest.mark.parametrize("code", ["[a, b]", "(a, b)", "{'k': a}", "[x for x in a]", "1.0"])
def test_plain_python_values_are_not_castable(code: str) -> None:
    assert not castable(ast.parse(code, mode="eval").body)
    assert castable(ast.parse("torch.stack([a, b])", mode="eval").body)
