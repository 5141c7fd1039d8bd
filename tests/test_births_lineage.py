"""The root of a dtype failure is where the odd dtype was born, past the helper that passed it on:

- a factory given another tensor's dtype (`torch.zeros(n, dtype=w.dtype)`) follows that tensor, made
  float32 by default in a helper: the default is the root, not the line that copied its dtype;
- an integer target inferred from Python ints by `torch.tensor` in a collate function, refused by a
  loss that wants floats: the root is that line, made float there;
- a NumPy array made float64 in a Dataset's `__init__` and converted in `__getitem__`: the root is the
  array's assignment, made float32 with `.astype`.

Each script is the user's (real torch ops); the first fix of the error is pasted where it says and the
script runs.
"""

from __future__ import annotations

import contextlib
import io
import os
import textwrap
from pathlib import Path

from dtype_doctor.causes import group_by_cause
from dtype_doctor.editing.paste import paste_all
from dtype_doctor.report import Finding, Fix, Report, Severity
from dtype_doctor.watching.run import RunOptions, run_program


def _script(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(text))
    return path


def _line(path: Path, mark: str) -> int:
    return next(i for i, row in enumerate(path.read_text().splitlines(), 1) if row.endswith(f"# {mark}"))


def _run(path: Path) -> Report:
    cwd = os.getcwd()
    os.chdir(path.parent)
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            code, report = run_program(RunOptions(target=str(path), argv=[]))
        grouped = group_by_cause(report)  # the root causes' fixes, as every renderer shows them
    finally:
        os.chdir(cwd)
    assert code != 0, "the script must fail as written"
    return grouped


def _error(report: Report) -> tuple[Finding, Fix]:
    f = next(f for f in report.findings if f.severity == Severity.ERROR)
    fix = next(x for x in f.fixes if x.language == "python" and x.snippet.strip())
    return f, fix


def _reaches(f: Finding, path: Path, line: int) -> bool:
    def walk(origin):  # type: ignore[no-untyped-def]
        yield origin
        for c in origin.chain:
            yield from walk(c)

    return any(
        o.file == path.name and o.line == line for op in f.operands if op.origin for o in walk(op.origin)
    )


def _pasted_runs(path: Path, fix: Fix) -> None:
    assert fix.file and os.path.basename(fix.file) == path.name and fix.line
    text = paste_all(path.read_text(), path.name, fix.line, fix.snippet)
    cwd = os.getcwd()
    os.chdir(path.parent)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(text, str(path), "exec"), {"__name__": "__main__", "__file__": str(path)})
    finally:
        os.chdir(cwd)


FOLLOWED = """\
import torch
from torch import nn


def edge_scale(count):
    w = torch.rand(count)  # BIRTH
    norm = torch.full((count,), 0.5, dtype=w.dtype)
    return w * norm


class Spread(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, h, src, dst):
        h = self.proj(h)
        msg = edge_scale(src.numel())[:, None] * h[src]
        return torch.zeros_like(h).index_add_(0, dst, msg)


model = Spread().half()
src, dst = torch.tensor([0, 1, 2]), torch.tensor([1, 2, 0])
print(model(torch.randn(3, 4).half(), src, dst).dtype)
"""


def test_a_factory_given_another_tensors_dtype_follows_it_to_the_default_birth(tmp_path: Path) -> None:
    path = _script(tmp_path, FOLLOWED)
    birth = _line(path, "BIRTH")
    f, fix = _error(_run(path))
    assert _reaches(f, path, birth)
    assert fix.line == birth and "float16" in fix.snippet
    _pasted_runs(path, fix)


TARGETS = """\
import torch
from torch import nn


def collate(rows):
    feats = torch.stack([r[0] for r in rows])
    tags = torch.tensor([r[1] for r in rows])  # BIRTH
    return feats, tags


head = nn.Linear(6, 3)
rows = [(torch.randn(6), [1, 0, 1]), (torch.randn(6), [0, 0, 1])]
feats, tags = collate(rows)
loss = nn.BCEWithLogitsLoss()(head(feats), tags)
print(loss.item())
"""


def test_an_integer_target_inferred_from_python_ints_is_made_float_where_it_is_made(tmp_path: Path) -> None:
    path = _script(tmp_path, TARGETS)
    birth = _line(path, "BIRTH")
    f, fix = _error(_run(path))
    assert _reaches(f, path, birth)
    assert fix.line == birth and "float32" in fix.snippet  # made float there (`dtype=`, or cast at once)
    _pasted_runs(path, fix)


WINDOWS = """\
import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Rows(Dataset):
    def __init__(self, n):
        self.table = np.random.default_rng(0).normal(size=(n, 5))  # BIRTH

    def __len__(self):
        return len(self.table)

    def __getitem__(self, i):
        return torch.from_numpy(self.table[i])


net = nn.Sequential(nn.Linear(5, 2))
for batch in DataLoader(Rows(8), batch_size=4):
    print(net(batch).shape)
"""
