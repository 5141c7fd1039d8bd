"""Silent wrong values (`run --numerics`): the first fix is made where the precision was lost, and it runs.

- a gradient that arrives NaN at the model's output from the loss is the consequence of the loss op
  whose bound rounds to 1 in float16: that op's fix leads, not a loss scaler;
- an op whose dtype a module's own buffer sets, made low by the module-wide cast: the module is kept
  in float32 through that cast (fixing the op alone leaves the buffer rounded);
- a timestep cast down before the model: kept float32, and the input of the model's first module with
  low-precision weights cast where the user's code calls it (two places, one fix, one `--write` edit set);
- keep_in_fp32 before a later `model.half()`: the kept module stays float32.

Each script is the user's (real torch, transformers and diffusers modules); the first fix of the first
error (else warning) finding is pasted where it says by the one paste rule and the script is run.
"""

from __future__ import annotations

import contextlib
import copy
import io
import os
import textwrap
from pathlib import Path

import pytest
import torch

import dtype_doctor as dd
from dtype_doctor.editing.paste import parts, paste_all
from dtype_doctor.patching.plan import Planner
from dtype_doctor.patching.search import patched
from dtype_doctor.report import Finding, Fix, Report, Severity
from dtype_doctor.watching.run import RunOptions, run_program

pytest.importorskip("transformers")
pytest.importorskip("diffusers")


def _script(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(text))
    return path


def _line(path: Path, mark: str) -> int:
    return next(i for i, row in enumerate(path.read_text().splitlines(), 1) if row.endswith(f"# {mark}"))


def _numerics_run(path: Path) -> Report:
    cwd = os.getcwd()
    os.chdir(path.parent)
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            code, report = run_program(RunOptions(target=str(path), argv=[], numerics=True))
    finally:
        os.chdir(cwd)
    assert code != 0, "the script must fail as written"
    return report


def _first_fix(report: Report) -> tuple[Finding, Fix]:
    for severity in (Severity.ERROR, Severity.WARNING):
        for f in report.findings:
            if f.severity == severity:
                for fix in f.fixes:
                    if fix.language == "python" and fix.snippet.strip():
                        return f, fix
    raise AssertionError([(f.code, f.severity, f.message[:100]) for f in report.findings])


def _pasted_runs(path: Path, fix: Fix) -> None:
    assert fix.file and os.path.basename(fix.file) == path.name and fix.line
    text = paste_all(path.read_text(), path.name, fix.line, fix.snippet)
    exec(compile(text, str(path), "exec"), {"__name__": "__main__", "__file__": str(path)})


LOSS = """\
import torch
from torch import nn
from transformers import GPT2Config, GPT2Model

torch.manual_seed(0)
backbone = GPT2Model(GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=64, n_positions=16)).half()
head = nn.Linear(32, 6).half()
with torch.no_grad():
    head.bias[1:].fill_(15.0)  # spans the fresh head is sure of


def span_loss(scores, keep):
    p = torch.sigmoid(scores)
    miss = torch.log(1 - p.clamp(max=1 - 1e-5))  # bound
    return -miss.masked_fill(~keep, 0.0).sum() / keep.sum()


ids = torch.randint(0, 64, (2, 8))
scores = head(backbone(ids).last_hidden_state)
keep = torch.zeros_like(scores, dtype=torch.bool)
keep[..., 0] = True
span_loss(scores, keep).backward()
bad = sum(int((~torch.isfinite(p.grad)).sum()) for p in head.parameters())
assert bad == 0, f"{bad} non-finite gradients"
"""


def test_a_nan_gradient_from_the_loss_is_fixed_at_the_loss_op_whose_bound_rounds_not_by_a_scaler(tmp_path):
    path = _script(tmp_path, LOSS)
    report = _numerics_run(path)
    finding, fix = _first_fix(report)
    assert finding.code == "finite-but-wrong" and finding.location.line == _line(path, "bound")
    assert "nan" in finding.message and "gradient" in finding.message
    assert ".float()" in fix.snippet and fix.line == _line(path, "bound")
    loss_side = [f for f in report.findings if f.data.get("kind") == "loss"]
    assert loss_side and all(f.severity == Severity.INFO and not f.fixes for f in loss_side)
    assert "clamp" in loss_side[0].data["consequence_of"]
    assert not any(
        "GradScaler" in x.title for f in report.findings if f.severity != Severity.INFO for x in f.fixes
    )
    _pasted_runs(path, fix)


ROTARY = """\
import torch
from torch import nn


class Rotary(nn.Module):
    def __init__(self, dim, base=10000.0):
        super().__init__()
        inv = 1.0 / base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
        self.register_buffer("inv_freq", inv, persistent=False)

    def forward(self, n):
        pos = torch.arange(n, dtype=self.inv_freq.dtype)  # positions
        ang = torch.einsum("i,j->ij", pos, self.inv_freq)
        return torch.cat([ang, ang], -1).cos()


class Attn(nn.Module):
    def __init__(self):
        super().__init__()
        self.qk = nn.Linear(16, 16)
        self.rope = Rotary(16)

    def forward(self, x):
        return self.qk(x) * self.rope(x.shape[1])


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Attn()])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


net = Net()
exact = net.blocks[0].rope(600)
net = net.bfloat16()  # cast
table = net.blocks[0].rope(600)
out = net(torch.randn(1, 600, 16, dtype=torch.bfloat16))
assert out.dtype == torch.bfloat16
assert (table.float() - exact).abs().max() < 0.05, "angles from a bfloat16 inv_freq"
"""


@pytest.mark.parametrize(
    "positions", ["torch.arange(n, dtype=self.inv_freq.dtype)", "torch.arange(n).type_as(self.inv_freq)"]
)
def test_an_op_whose_dtype_a_cast_buffer_sets_is_fixed_by_keeping_its_module_float32_through_the_cast(
    tmp_path, positions
):
    path = _script(tmp_path, ROTARY.replace("torch.arange(n, dtype=self.inv_freq.dtype)", positions))
    report = _numerics_run(path)
    finding, fix = _first_fix(report)
    assert finding.location.line == _line(path, "positions")
    assert fix.line == _line(path, "cast")  # the birth of the lost precision, not the arange
    assert "keep_in_fp32(net, ['blocks.0.rope'], out_dtype=torch.bfloat16)" in fix.snippet
    assert "inv_freq" in fix.title
    _pasted_runs(path, fix)


TIMESTEP = """\
import torch
from diffusers.models.embeddings import TimestepEmbedding, Timesteps
from torch import nn


class TinyDiT(nn.Module):
    def __init__(self, dim=32):
        super().__init__()
        self.time_proj = Timesteps(dim, flip_sin_to_cos=True, downscale_freq_shift=0)
        self.time_embedder = TimestepEmbedding(dim, 2 * dim)
        self.proj_in = nn.Linear(4, 2 * dim)

    def forward(self, latents, timestep):
        t_freq = self.time_proj(timestep).to(timestep.dtype)
        return self.proj_in(latents) + self.time_embedder(  # embedded
            t_freq
        )[:, None]


torch.manual_seed(0)
dit = TinyDiT().to(dtype=torch.bfloat16)
timestep = torch.linspace(1.0, 0.0, 31)[1:2] * 1000  # 966.67
latents = torch.randn(1, 8, 4, dtype=torch.bfloat16)
step = timestep.to(dit.proj_in.weight.dtype)  # rounded
out = dit(latents, step)
assert out.dtype == torch.bfloat16
assert step.item() == timestep.item(), (step.item(), timestep.item())
"""


def test_a_timestep_rounded_by_its_cast_stays_float32_and_the_embedding_is_cast_where_the_model_reads_it(
    tmp_path,
):
    path = _script(tmp_path, TIMESTEP)
    report = _numerics_run(path)
    finding, fix = _first_fix(report)
    assert finding.location.line == _line(path, "rounded") and fix.line == _line(path, "rounded")
    (_, _, first), (named, at, second) = parts(fix.snippet)
    assert first == "step = timestep"
    assert (named, at) == ("train.py", _line(path, "embedded"))
    assert "t_freq.to(next(self.time_embedder.parameters()).dtype)" in second  # a call over 3 lines
    assert "'time_embedder'" in fix.title
    _pasted_runs(path, fix)


def test_the_two_place_fix_is_one_candidate_of_run_write_with_both_edits(tmp_path, monkeypatch):
    path = _script(tmp_path, TIMESTEP)
    report = _numerics_run(path)
    monkeypatch.chdir(tmp_path)  # the report's places are relative to where it ran
    causes = Planner(lambda p: os.path.realpath(p) == os.path.realpath(path)).plan(report)
    (first,) = [c for cause in causes for c in cause.candidates if c.title.startswith("Keep `timestep`")][:1]
    assert len(first.edits) == 2
    text = patched({first.edits[0].path: path.read_text()}, first.edits)[first.edits[0].path]
    assert "step = timestep\n" in text and ".to(next(self.time_embedder.parameters()).dtype)" in text
    exec(compile(text, str(path), "exec"), {"__name__": "__main__"})


def test_paste_all_puts_each_part_at_its_own_line_of_this_file_only():
    text = "a = 1\nb = f(a)\nc = g(b)\n"
    snippet = "b = f(a.float())\n# and at x/other.py:1:\nz = 0\n# and at here.py:3:\nc = g(b.half())"
    assert [(f, n) for f, n, _ in parts(snippet)] == [(None, None), ("x/other.py", 1), ("here.py", 3)]
    assert paste_all(text, "here.py", 2, snippet) == "a = 1\nb = f(a.float())\nc = g(b.half())\n"


def test_a_kept_module_stays_float32_through_a_later_half_and_its_island_promotes_nothing():
    from tiny_models import gpt2

    model = gpt2(head=False).eval()
    ids = torch.randint(0, 128, (1, 8))
    with torch.no_grad():
        want = model(ids).last_hidden_state
    handle = dd.numerics.keep_in_fp32(model, ["ln_f"])
    model.half()  # after the keep, as scripts do
    assert model.ln_f.weight.dtype == torch.float32 and model.h[0].ln_1.weight.dtype == torch.float16
    twin = copy.deepcopy(model)
    twin.half()
    assert twin.ln_f.weight.dtype == torch.float32 and model.ln_f.weight.dtype == torch.float32
    with dd.watch() as session, torch.no_grad():
        got = model(ids).last_hidden_state
    assert got.dtype == torch.float16  # the model's own output dtype
    assert not [f.code for f in session.report.findings], session.report.findings
    torch.testing.assert_close(got.float(), want, atol=0.05, rtol=0.05)
    handle.remove()
    model.half()
    assert model.ln_f.weight.dtype == torch.float16
