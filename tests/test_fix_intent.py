"""A float32 region made on purpose (`z = x.to(torch.float32)` for stable maths) whose result reaches
a bfloat16 layer: the first fix casts the region's result where it enters the layer, and runs; the
cast at the upcast's own line, which lowers the region, comes last and says so."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

import dtype_doctor as dd

HERE = Path(__file__).resolve()


def _line(mark: str) -> int:
    lines = HERE.read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if text.rstrip().endswith(f"# mark: {mark}"))


class Codebook(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(6, 4)
        self.out = nn.Linear(4, 6)
        self.register_buffer("centres", torch.randn(5, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.inp(x).to(torch.float32)  # mark: upcast
        nearest = (z[:, None] - self.centres.float()).pow(2).sum(-1).argmin(-1)
        snapped = z + (self.centres.float()[nearest] - z).detach()
        return self.out(snapped)  # mark: seam


def test_a_deliberate_float32_region_is_cast_where_it_leaves_not_lowered_where_it_starts():
    torch.manual_seed(0)
    model = Codebook().to(torch.bfloat16)
    x = torch.randn(3, 6, dtype=torch.bfloat16)
    with dd.watch(model=model) as s, pytest.raises(RuntimeError):
        model(x)
    (f,) = s.report.errors
    assert f.data["intended"]["deliberate"].startswith("float32 asked for")
    first, last = f.fixes[0], [x for x in f.fixes if f"{HERE.name}:{_line('upcast')}" in x.title]
    assert first.snippet.startswith("snapped = snapped.to(torch.bfloat16)")
    assert len(last) == 1 and "last resort" in last[0].title and f.fixes.index(last[0]) > 0
    body = textwrap.indent(first.snippet, "    ")  # pasted before the line that failed
    source = (
        "def forward(self, x):\n"
        "    z = self.inp(x).to(torch.float32)\n"
        "    nearest = (z[:, None] - self.centres.float()).pow(2).sum(-1).argmin(-1)\n"
        "    snapped = z + (self.centres.float()[nearest] - z).detach()\n"
        f"{body}\n"
        "    return self.out(snapped)\n"
    )
    scope = {"torch": torch}
    exec(compile(source, "<fix>", "exec"), scope)
    out = scope["forward"](model, x)
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()


def test_a_fix_a_replay_found_failing_is_never_shown_first():
    from dtype_doctor import remedies
    from dtype_doctor.patching.attach import rank
    from dtype_doctor.processors import present

    model = Codebook().to(torch.bfloat16)
    with dd.watch(model=model) as s, pytest.raises(RuntimeError):
        model(torch.randn(3, 6, dtype=torch.bfloat16))
    (f,) = s.report.errors
    failing = remedies.revise(f.fixes[-1], verified=False, verification="fails: replayed, RuntimeError")
    f.fixes = [failing, *f.fixes[:-1]]
    shown = present(s.report).findings[0].fixes
    assert shown[0].verified is not False
    assert (shown[-1].title, shown[-1].verified) == (failing.title, False)
    # the others in the one order every output shows: verified, then edits, then advice (stable)
    assert sorted(x.snippet for x in shown[:-1]) == sorted(x.snippet for x in f.fixes[1:])
    assert [rank(x) for x in shown] == sorted(rank(x) for x in shown)
