"""The first fix of an op-level overflow runs and gives the float32 result: every tensor operand
of a product is upcast (their dtypes agree), and an exp whose result float16 cannot hold is
bounded (a float32 exp would meet float16 tensors again). Each fix is executed in the user's
statement's place."""

from __future__ import annotations

import textwrap
from pathlib import Path

import torch
from torch import nn

import dtype_doctor as dd

HERE = Path(__file__).resolve()


def _line(mark: str) -> int:
    lines = HERE.read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if text.rstrip().endswith(f"# mark: {mark}"))


def _overflow(report) -> dd.report.Finding:  # type: ignore[name-defined]
    found = [
        f
        for f in report.findings
        if f.code == "fp16-overflow"
        and f.severity.value == "error"
        and f.location
        and f.location.file == str(HERE)
    ]
    assert found, [(f.code, f.message[:120]) for f in report.findings]
    return found[0]


def _exec(snippet: str, namespace: dict) -> dict:
    scope = {"torch": torch, **namespace}
    exec(compile(textwrap.dedent(snippet), "<fix>", "exec"), scope)
    return scope


def _gram(feats: torch.Tensor, proj: torch.Tensor) -> torch.Tensor:
    gram = torch.matmul(feats, proj) / 16  # mark: matmul
    return gram


def test_a_product_divided_after_it_overflowed_float16_is_divided_first_and_stays_float16():
    feats = torch.full((4, 64), 40.0).half()
    proj = torch.full((64, 4), 40.0).half()
    with dd.watch(numerics=True) as s:
        _gram(feats, proj)
    f = _overflow(s.report)
    assert f.location.line == _line("matmul")
    scaled, upcast = f.fixes[0], f.fixes[1]
    assert scaled.snippet == "gram = torch.matmul(feats / 16, proj)"
    assert upcast.snippet == "gram = torch.matmul(feats.float(), proj.float()) / 16"
    want = feats.float() @ proj.float() / 16
    for fix, dtype in ((scaled, torch.float16), (upcast, torch.float32)):
        gram = _exec(fix.snippet, {"feats": feats, "proj": proj})["gram"]
        assert gram.dtype == dtype and torch.isfinite(gram).all()
        torch.testing.assert_close(gram.float(), want)


def _energy(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    energy = torch.bmm(a, b.transpose(1, 2))  # mark: bmm
    return energy


def test_a_product_of_two_float16_tensors_that_overflows_upcasts_both_operands_and_the_fix_runs():
    a = torch.full((2, 3, 64), 40.0).half()
    b = torch.full((2, 3, 64), 40.0).half()
    with dd.watch(numerics=True) as s:
        _energy(a, b)
    f = _overflow(s.report)
    assert f.location.line == _line("bmm")
    fix = f.fixes[0]
    assert fix.snippet == "energy = torch.bmm(a.float(), b.transpose(1, 2).float())"
    assert "its operands `a`, `b.transpose(1, 2)`" in fix.title
    energy = _exec(fix.snippet, {"a": a, "b": b})["energy"]
    assert energy.dtype == torch.float32 and torch.isfinite(energy).all()
    torch.testing.assert_close(energy, torch.bmm(a.float(), b.float().transpose(1, 2)))


class Similarity(nn.Module):
    """A contrastive head: a learned log-temperature exponentiated in the model's dtype."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(8, 8)
        self.log_temp = nn.Parameter(torch.tensor(12.5))

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a = nn.functional.normalize(self.embed(a), dim=-1)
        b = nn.functional.normalize(self.embed(b), dim=-1)
        temp = torch.exp(self.log_temp)  # mark: exp
        return temp * a @ b.t()


def test_an_exp_that_overflows_float16_is_bounded_first_and_the_model_then_gives_a_finite_loss():
    torch.manual_seed(0)
    model = Similarity().half()
    a, b = torch.randn(4, 8).half(), torch.randn(4, 8).half()
    with dd.watch(numerics=True) as s, torch.no_grad():
        model(a, b)
    f = _overflow(s.report)
    assert f.location.line == _line("exp")
    fix = f.fixes[0]
    assert fix.snippet == "temp = torch.exp(self.log_temp.clamp(max=11.08))"
    # the fix in the forward, as a user pastes it: the logits and their loss are finite
    source = textwrap.dedent(
        """
        def forward(self, a, b):
            a = nn.functional.normalize(self.embed(a), dim=-1)
            b = nn.functional.normalize(self.embed(b), dim=-1)
            FIX
            return temp * a @ b.t()
        """
    ).replace("FIX", fix.snippet)
    forward = _exec(source, {"nn": nn})["forward"]
    with torch.no_grad():
        logits = forward(model, a, b)
        plain = Similarity.forward(model, a, b)
    assert not torch.isfinite(plain).all()  # the bug: inf logits
    loss = nn.functional.cross_entropy(logits.float(), torch.arange(4))
    assert logits.dtype == torch.float16 and torch.isfinite(logits).all() and torch.isfinite(loss)


def _angles(n: int, inv: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    pos = torch.arange(n, dtype=dtype)  # mark: positions
    return torch.outer(pos, inv.to(dtype))


class SinTable(nn.Module):
    def __init__(self, n: int = 1024) -> None:
        super().__init__()
        inv = 1.0 / 10000 ** (torch.arange(0, 8, 2).float() / 8)
        angles = _angles(n, inv, dtype=torch.bfloat16)  # mark: caller
        self.register_buffer("table", angles.sin(), persistent=False)


def test_positions_made_in_a_dtype_the_caller_passed_are_fixed_at_the_caller_and_the_table_is_then_exact():
    with dd.watch(numerics=True) as s:
        SinTable()
    (f,) = [f for f in s.report.findings if f.code == "finite-but-wrong" and f.location.file == str(HERE)]
    assert f.location.line == _line("positions")
    fix = f.fixes[0]
    assert f"{HERE.name}:{_line('caller')}" in fix.title
    assert "dtype=torch.float32" in fix.snippet and "torch.bfloat16" not in fix.snippet
    inv = 1.0 / 10000 ** (torch.arange(0, 8, 2).float() / 8)
    angles = _exec(fix.snippet, {"n": 1024, "inv": inv, "_angles": _angles})["angles"]
    exact = torch.outer(torch.arange(1024, dtype=torch.float64), inv.double()).sin()
    assert (SinTable().table.double() - exact).abs().max() > 0.5  # the bug: angles off by radians
    assert (angles.sin().double() - exact).abs().max() < 1e-3


def test_gradients_accumulated_in_bfloat16_parameters_are_fixed_at_the_module_cast_and_the_fixed_model_runs():
    torch.manual_seed(0)
    batches = [torch.randn(8, 32) + (300.0 if i == 0 else 0.0) for i in range(8)]
    with dd.watch(numerics=True) as s:
        net = nn.Sequential(nn.Linear(32, 1, bias=False)).bfloat16()  # mark: module cast
        for xb in batches:
            net(xb.bfloat16()).float().sum().backward()
    (f,) = [f for f in s.report.findings if "gradient accumulation" in f.message]
    fix = f.fixes[0]
    assert f"{HERE.name}:{_line('module cast')}" in fix.title
    assert fix.snippet.startswith("net = nn.Sequential(nn.Linear(32, 1, bias=False))\n")
    torch.manual_seed(1)
    net = _exec(fix.snippet, {"nn": nn})["net"]
    ref = nn.Sequential(nn.Linear(32, 1, bias=False))
    ref.load_state_dict(net.state_dict())
    for xb in batches:
        net(xb.bfloat16()).float().sum().backward()  # the script's own bfloat16 inputs, unchanged
        ref(xb).sum().backward()
    grad, want = net[0].weight.grad, ref[0].weight.grad
    assert grad.dtype == torch.float32
    assert ((grad - want).abs().max() / want.abs().max()).item() < 0.01


def _stats(feats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    power = (feats * feats).sum(-1)  # mark: power
    gram = feats @ feats.t()  # mark: gram
    return power, gram


def test_two_overflows_computed_from_one_float16_output_are_fixed_once_where_it_is_made():
    from dtype_doctor.causes import group_by_cause

    layer = nn.Linear(16, 64).half()
    with dd.watch(numerics=True) as s, torch.no_grad():
        layer.weight.fill_(2.0)
        layer.bias.zero_()
        feats = layer(torch.full((3, 16), 2.0).half())  # mark: made
        _stats(feats)
    overflows = [f for f in group_by_cause(s.report).findings if f.code == "fp16-overflow"]
    assert {f.location.line for f in overflows} == {_line("power"), _line("gram")}
    for f in overflows:  # one root, one edit for both
        assert f.root_cause.startswith("float16 output of Linear `feats` (")
        assert f"{HERE.name}:{_line('made')}) → 2 findings" in f.root_cause
        assert f.fixes[0].snippet == "feats = feats.to(torch.float32)"
        assert HERE.name in f.fixes[0].file and f.fixes[0].line == _line("made")
    feats = _exec(overflows[0].fixes[0].snippet, {"feats": feats})["feats"]
    power, gram = _stats(feats)
    assert torch.isfinite(power).all() and torch.isfinite(gram).all()
    assert power[0].item() == 64 * 64.0**2


def test_a_single_overflow_keeps_its_own_statements_fix_first():
    from dtype_doctor.causes import group_by_cause

    a = torch.full((2, 3, 64), 40.0).half()
    with dd.watch(numerics=True) as s:
        _energy(a, a)
    (f,) = [f for f in group_by_cause(s.report).findings if f.code == "fp16-overflow"]
    assert f.fixes[0].snippet == "energy = torch.bmm(a.float(), b.transpose(1, 2).float())"
