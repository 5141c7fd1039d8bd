"""A number the destination dtype cannot hold (overflow-on-cast): the first fix is code, in the
script's own names, at a line of the script, and the script runs once it is pasted there (issue 29:
fixes by hand, `--write`). Each case is a small program of its own with another spelling: an
in-place fill with a literal, a module constant clamped where it is used, a float32 limit taken
where it is set, a call written over several lines; and the spellings that fit (no finding)."""

from __future__ import annotations

import runpy
import textwrap
from pathlib import Path

import pytest
import torch

from dtype_doctor import watch
from dtype_doctor.editing.paste import paste

HEADER = """\
import torch
from torch import nn
"""

IN_PLACE_LITERAL = """\
class Scores(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, h, pad):
        scores = self.proj(h) @ h.transpose(-1, -2)
        scores.masked_fill_(pad, -1e9)
        return scores.softmax(-1)


net = Scores().half()
h = torch.randn(2, 4, 8, dtype=torch.float16)
pad = torch.zeros(2, 4, 4, dtype=torch.bool)
pad[:, :, -1] = True
print(net(h, pad).shape)
"""

MODULE_CONSTANT = """\
NEG_INF = -1e30


def additive_mask(keep, like):
    bias = torch.full_like(like, NEG_INF)
    return bias.masked_fill(keep, 0.0)


keep = torch.tril(torch.ones(5, 5, dtype=torch.bool))
scores = torch.randn(5, 5, dtype=torch.float16)
print((scores + additive_mask(keep, scores)).softmax(-1).sum())
"""

LIMIT_OF_ANOTHER_DTYPE = """\
class Clip(nn.Module):
    def forward(self, h):
        top = torch.finfo(torch.float32).max
        return h.clamp(max=top) * 2


print(Clip()(torch.randn(3, dtype=torch.bfloat16).half()))
"""

ATTRIBUTE = """\
class Gate(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 6)
        self.blocked = -1e6

    def forward(self, h):
        h = self.lin(h)
        return h.index_fill(-1, torch.tensor([0]), self.blocked)


print(Gate().half()(torch.randn(2, 6, dtype=torch.float16)))
"""

OVER_LINES = """\
def causal(t, dtype):
    return torch.full(
        (t, t),
        -1e9,
        dtype=dtype,
    ).triu(1)


print(causal(4, torch.float16))
"""


WHERE_LITERAL = """\
class Attn(nn.Module):
    def __init__(self):
        super().__init__()
        self.qk = nn.Linear(16, 32)

    def forward(self, x, keep):
        q, k = self.qk(x).chunk(2, -1)
        scores = torch.where(keep, q @ k.transpose(-1, -2), -1e9)
        return scores.softmax(-1) @ x


torch.manual_seed(0)
keep = torch.ones(2, 4, 4, dtype=torch.bool)
keep[0] = False  # a fully padded sample: every score is the fill value
out = Attn().half()(torch.randn(2, 4, 16).half(), keep)
"""


SAME_NAME_OUTSIDE = """\
class Masker(nn.Module):
    def forward(self, x, bias):
        bias = bias.masked_fill(bias < 0, -1e8)
        return x + bias


x = torch.randn(3, dtype=torch.float16)
bias = torch.tensor([0.0, -1.0, 0.0], dtype=torch.float16)
print(Masker()(x, bias))
"""


def _diagnose(tmp_path: Path, body: str):
    script = tmp_path / "bug.py"
    script.write_text(HEADER + body)
    with pytest.raises(RuntimeError, match="without overflow"), watch() as s:  # watch sees the crash
        runpy.run_path(str(script), run_name="__main__")
    (finding,) = s.report.errors
    assert finding.code == "overflow-on-cast"
    return script, finding


def _first_fix_runs(script: Path, finding) -> tuple[int, str]:
    """The first fix pasted where it says, as a user reads it; the script then runs."""
    fix = finding.fixes[0]
    assert fix.file and fix.line and Path(fix.file).name == script.name
    script.write_text(paste(script.read_text(), fix.line, fix.snippet))
    runpy.run_path(str(script), run_name="__main__")
    return fix.line, fix.snippet


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate((HEADER + text).splitlines(), 1) if needle in line)


def test_an_in_place_fill_with_a_literal_takes_the_receivers_own_limit(tmp_path):
    script, finding = _diagnose(tmp_path, IN_PLACE_LITERAL)
    line, snippet = _first_fix_runs(script, finding)
    assert line == _line_of(IN_PLACE_LITERAL, "masked_fill_")
    assert snippet == "scores.masked_fill_(pad, torch.finfo(scores.dtype).min)"
    assert "-1e9" in finding.fixes[0].title
    assert "inside the replayed call" in finding.fixes[0].verification  # only a re-run runs it


def test_a_fix_inside_the_forward_is_not_replayed_before_the_call_under_the_same_name(tmp_path):
    """The caller's `bias` is not the forward's: the live replay would rebind the caller's and
    run the unchanged forward, and call the fix failing. Only a re-run of the patched script runs it."""
    script, finding = _diagnose(tmp_path, SAME_NAME_OUTSIDE)
    fix = finding.fixes[0]
    assert fix.verified is None and "inside the replayed call" in fix.verification
    _, snippet = _first_fix_runs(script, finding)
    assert snippet == "bias = bias.masked_fill(bias < 0, torch.finfo(bias.dtype).min)"


def test_a_module_constant_is_clamped_where_it_is_used(tmp_path):
    script, finding = _diagnose(tmp_path, MODULE_CONSTANT)
    assert any(o.origin and o.origin.line == _line_of(MODULE_CONSTANT, "NEG_INF =") for o in finding.operands)
    line, snippet = _first_fix_runs(script, finding)
    assert line == _line_of(MODULE_CONSTANT, "full_like")
    # the module level does not know `like`: the number is clamped at the use, in the call's names
    assert snippet == "bias = torch.full_like(like, max(NEG_INF, torch.finfo(like.dtype).min))"


def test_the_limit_of_another_dtype_is_taken_of_the_destination_where_it_is_set(tmp_path):
    script, finding = _diagnose(tmp_path, LIMIT_OF_ANOTHER_DTYPE)
    line, snippet = _first_fix_runs(script, finding)
    assert line == _line_of(LIMIT_OF_ANOTHER_DTYPE, "top =")  # the birth of the value: the root
    assert snippet == "top = torch.finfo(h.dtype).max"
    use = finding.fixes[1]
    assert use.line == _line_of(LIMIT_OF_ANOTHER_DTYPE, "clamp")
    assert use.snippet == "return h.clamp(max=min(top, torch.finfo(h.dtype).max)) * 2"


def test_an_attribute_holding_the_number_is_clamped_where_it_is_used(tmp_path):
    script, finding = _diagnose(tmp_path, ATTRIBUTE)
    line, snippet = _first_fix_runs(script, finding)
    assert line == _line_of(ATTRIBUTE, "index_fill")
    assert (
        snippet == "return h.index_fill(-1, torch.tensor([0]), max(self.blocked, torch.finfo(h.dtype).min))"
    )


def test_a_call_written_over_lines_is_rewritten_whole(tmp_path):
    script, finding = _diagnose(tmp_path, OVER_LINES)
    line, snippet = _first_fix_runs(script, finding)
    assert line == _line_of(OVER_LINES, "torch.full(")
    assert "torch.finfo(dtype).min," in snippet and "-1e9" not in snippet
    assert snippet.startswith("return torch.full(\n")


def test_a_literal_torch_writes_as_inf_silently_takes_the_limit_of_the_other_branch(tmp_path):
    """torch.where(keep, scores, -1e9) in float16 raises nothing: -1e9 is -inf, a fully masked row
    is NaN after the softmax. Found by the numerics watch; the fix names the branch's dtype (not
    the condition's), and the patched script's output is finite."""
    script = tmp_path / "where.py"
    script.write_text(HEADER + WHERE_LITERAL)
    with watch(numerics=True) as s:
        assert torch.isnan(runpy.run_path(str(script), run_name="__main__")["out"]).any()
    first = next(f for f in s.report.errors if f.code == "fp16-overflow").fixes[0]
    assert first.line == _line_of(WHERE_LITERAL, "torch.where")
    assert (
        first.snippet == "scores = torch.where(keep, q @ k.transpose(-1, -2), torch.finfo(torch.float16).min)"
    )
    script.write_text(paste(script.read_text(), first.line, first.snippet))
    assert torch.isfinite(runpy.run_path(str(script), run_name="__main__")["out"]).all()


TENSOR_OF_A_NUMBER = """\
class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x, keep):
        logits = self.lin(x)
        floor = torch.tensor(-1e9, dtype=logits.dtype)
        return torch.where(keep, logits, floor).softmax(-1)


out = Head().half()(torch.randn(2, 8).half(), torch.zeros(2, 8, dtype=torch.bool))
"""


def test_a_tensor_made_of_the_number_takes_the_limit_of_its_dtype_argument(tmp_path):
    script = tmp_path / "floor.py"
    script.write_text(HEADER + TENSOR_OF_A_NUMBER)
    with watch(numerics=True) as s:
        runpy.run_path(str(script), run_name="__main__")
    fixes = next(f for f in s.report.errors if f.code == "fp16-overflow").fixes
    assert fixes[0].snippet == "floor = torch.tensor(torch.finfo(logits.dtype).min, dtype=logits.dtype)"
    assert not any("(-1e9).float()" in f.snippet for f in fixes)  # a number is not upcast
    script.write_text(paste(script.read_text(), fixes[0].line, fixes[0].snippet))
    assert torch.isfinite(runpy.run_path(str(script), run_name="__main__")["out"]).all()


@pytest.mark.parametrize(
    "body",
    [
        "x = torch.zeros(3, dtype=torch.float16).masked_fill(torch.ones(3, dtype=torch.bool), float('-inf'))",
        "x = torch.zeros(3, dtype=torch.bfloat16).masked_fill(torch.ones(3, dtype=torch.bool), -1e9)",
        "x = torch.full((3,), -10000.0, dtype=torch.float16)",
    ],
)
def test_numbers_the_dtype_holds_give_no_finding(tmp_path, body):
    script = tmp_path / "fits.py"
    script.write_text(HEADER + textwrap.dedent(body) + "\n")
    with watch() as s:
        runpy.run_path(str(script), run_name="__main__")
    assert not s.report.errors
