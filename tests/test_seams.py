"""The first fix is at the birth of the odd operand, in the user's names, never a cast "at the seam" on
a placeholder: a loss weight made from NumPy float64 is made float32 where it is made; a grid of
factories without dtype= is made in the model's dtype on the line that makes it (every factory of
it); a table held by a module that models of two dtypes share is cast where the module reads it,
to the dtype of what that call was given. Each script runs under `dtype-doctor run`, the first fix
of the first error is pasted where it says (the paste rule `run --write` and
scripts/fix_by_hand.py follow), and the patched script runs with plain python."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cli_process import ENV, dtype_doctor
from dtype_doctor import catalog
from dtype_doctor.editing.birth_line import made_in, read_cast
from dtype_doctor.editing.paste import paste

NLL_WEIGHT = """\
import numpy as np
import torch
from torch import nn

seen = np.array([40, 10, 50])
balance = seen.sum() / (3.0 * seen)
net = nn.Sequential(nn.Linear(6, 3), nn.LogSoftmax(-1))
loss_fn = nn.NLLLoss(weight=torch.from_numpy(balance))
scores, labels = net(torch.randn(5, 6)), torch.tensor([0, 1, 2, 1, 0])
print(loss_fn(scores, labels).item())
"""

MESH_GRID = """\
import torch
from torch import nn
import torch.nn.functional as F


class Resample(nn.Module):
    def __init__(self):
        super().__init__()
        self.offset = nn.Conv2d(3, 2, 1)

    def forward(self, image):
        n, _, h, w = image.shape
        rows, cols = torch.meshgrid(torch.arange(0.5, h) / h, torch.arange(0.5, w) / w, indexing="ij")
        base = torch.stack((cols, rows), -1)[None] * 2 - 1
        shifted = base + self.offset(image).permute(0, 2, 3, 1)
        return F.grid_sample(image, shifted, align_corners=False)


layer = Resample().to(torch.bfloat16)
with torch.no_grad():
    print(layer(torch.randn(1, 3, 8, 8, dtype=torch.bfloat16)).dtype)
"""

SHARED_TABLE = """\
import torch
from torch import nn

_TABLES = {}


class Positions(nn.Module):
    def __init__(self, length, width, dtype):
        super().__init__()
        angles = torch.arange(length)[:, None] / 10000 ** (torch.arange(width) / width)
        self.register_buffer("table", angles.sin().to(dtype), persistent=False)

    def forward(self, hidden):
        weights = (hidden @ self.table[: hidden.shape[0]].T).softmax(-1)
        return weights @ hidden


def positions(length, width, dtype):
    wanted = (length, width)
    if wanted not in _TABLES:
        _TABLES[wanted] = Positions(length, width, dtype)
    return _TABLES[wanted]


class Encoder(nn.Module):
    def __init__(self, dtype):
        super().__init__()
        self.pos = positions(16, 8, dtype)
        self.mix = nn.Linear(8, 8, dtype=dtype)

    def forward(self, hidden):
        return self.mix(self.pos(hidden))


wide = Encoder(torch.float32)
small = Encoder(torch.float16)
with torch.no_grad():
    print(wide(torch.randn(4, 8)).dtype)
    print(small(torch.randn(4, 8, dtype=torch.float16)).dtype)
"""


def _first_fix(script: Path) -> dict:
    out = script.with_suffix(".json")
    dtype_doctor("run", "--json", str(out), script.name, cwd=script.parent)
    findings = json.loads(out.read_text())["findings"]
    errors = [f for f in findings if f["severity"] == "error"] or findings
    return next(fix for f in errors for fix in f["fixes"] if fix["snippet"].strip())


def _pasted_runs(script: Path, fix: dict) -> subprocess.CompletedProcess:
    script.write_text(paste(script.read_text(), fix["line"], fix["snippet"]))
    return subprocess.run(
        [sys.executable, script.name], cwd=script.parent, capture_output=True, text=True, env=ENV
    )


@pytest.mark.parametrize(
    ("source", "line", "snippet"),
    [
        (NLL_WEIGHT, 8, "loss_fn = nn.NLLLoss(weight=torch.from_numpy(balance).to(torch.float32))"),
        (
            MESH_GRID,
            13,
            "rows, cols = torch.meshgrid(torch.arange(0.5, h, dtype=torch.bfloat16) / h, "
            'torch.arange(0.5, w, dtype=torch.bfloat16) / w, indexing="ij")',
        ),
        (
            SHARED_TABLE,
            14,
            "weights = (hidden @ self.table[: hidden.shape[0]].to(hidden.dtype).T).softmax(-1)",
        ),
    ],
    ids=["numpy-loss-weight", "meshgrid-factories", "shared-module-table"],
)
def test_the_first_fix_edits_the_birth_in_the_users_names_and_runs(tmp_path, source, line, snippet):
    script = tmp_path / "job.py"
    script.write_text(source)
    fix = _first_fix(script)
    assert (Path(fix["file"]).name, fix["line"], fix["snippet"]) == ("job.py", line, snippet)
    assert fix["verification"]  # every shown fix has a label
    done = _pasted_runs(script, fix)
    assert done.returncode == 0, done.stderr[-800:]


def test_a_placeholder_seam_cast_is_advice_after_the_others_when_the_user_has_no_such_name():
    fixes = catalog.fixes_for(
        "scalar-type-mismatch", (), module="loss", tensor=None, dtype="torch.float32", places={}
    )
    seam = next(f for f in fixes if f.title.startswith("Cast at the seam"))
    assert seam.snippet == "" and seam.file is None
    coded = [i for i, f in enumerate(fixes) if f.snippet.strip()]
    assert all(i < fixes.index(seam) for i in coded)
    # explain (a log: no frames read) keeps its template code as before
    (logged,) = [f for f in catalog.fixes_for("scalar-type-mismatch", (), module="loss") if "seam" in f.title]
    assert logged.snippet.startswith("x = x.to(")


def test_a_birth_line_is_rewritten_only_where_the_user_chose_no_dtype(tmp_path):
    src = tmp_path / "birth.py"
    src.write_text(
        textwrap.dedent("""\
        import torch
        a = torch.as_tensor([1.0, 2.0], dtype=torch.float64)
        b = torch.cat([
            torch.zeros(2),
            torch.ones(2),
        ])
        c = torch.from_numpy(arr) * 2
        d = torch.load(f)["state"]["w"]
        """)
    )
    path = str(src)
    assert made_in(path, 2, "torch.as_tensor", "torch.float32") is None  # the user's own dtype=
    assert made_in(path, 4, "torch.zeros", "torch.float16") == (
        "b = torch.cat([\n    torch.zeros(2, dtype=torch.float16),\n    torch.ones(2),\n])",
        3,
    )
    assert made_in(path, 7, "torch.from_numpy", "torch.float32") == (
        "c = torch.from_numpy(arr).to(torch.float32) * 2",
        7,
    )
    assert made_in(path, 8, "torch.load", "torch.float16") == (  # the tensor taken from what it returns
        'd = torch.load(f)["state"]["w"].to(torch.float16)',
        8,
    )
    assert read_cast(path, 7, "missing", "x.dtype") is None
