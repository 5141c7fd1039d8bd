"""Op-level numerics (numerics/opwatch.py, optrace.py): silent precision bugs outside and inside
module forwards, each named by family code at the user's line with the module as `run` names it
and the line where the low-precision operand was made; each fix written in the user's statement
is executed. Healthy float16 models with a loss and a metric around them give no finding."""

from __future__ import annotations

import inspect
import logging
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

import dtype_doctor as dd
import tiny_models

HERE = Path(__file__).resolve()


def _line(mark: str) -> int:
    lines = HERE.read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if text.rstrip().endswith(f"# mark: {mark}"))


def _only(report, code: str):
    found = [f for f in report.findings if f.code == code and f.location and f.location.file == str(HERE)]
    assert len(found) == 1, [(f.code, f.message) for f in report.findings]
    return found[0]


def _run_fix(snippet: str, namespace: dict) -> dict:
    exec(compile(textwrap.dedent(snippet), "<fix>", "exec"), {"torch": torch}, namespace)
    return namespace


# -- constants the low dtype cannot hold ---------------------------------------------------------
def _safe_inverse(act: torch.Tensor) -> torch.Tensor:
    guarded = act.clamp_min(1e-9)  # mark: clamp_min
    return 1.0 / guarded


def test_an_eps_below_float16s_smallest_value_is_named_at_its_line_and_the_upcast_fix_runs():
    act = torch.relu(torch.linspace(-1, 1, 16)).half()
    with dd.watch(numerics=True) as s:
        _safe_inverse(act)
    f = _only(s.report, "fp16-underflow")
    assert f.location.line == _line("clamp_min") and f.location.op == "clamp_min"
    assert "1e-09 is 0 in float16" in f.message
    fix = f.fixes[0]
    assert fix.snippet == "guarded = act.float().clamp_min(1e-9)"
    ns = _run_fix(fix.snippet, {"act": act})
    assert torch.isfinite(1.0 / ns["guarded"]).all()  # the guard works in float32


def _force(logits: torch.Tensor, forced: torch.Tensor) -> torch.Tensor:
    logits[forced] = 1e5  # mark: setitem
    return logits


def test_a_value_stored_beyond_float16s_range_is_an_overflow_at_its_line():
    logits = torch.randn(2, 4).half()
    forced = torch.tensor([[False, True, False, False], [False, False, False, False]])
    with dd.watch(numerics=True) as s:
        _force(logits.clone(), forced)
    f = _only(s.report, "fp16-overflow")
    assert f.location.line == _line("setitem") and f.severity.value == "error"
    assert "100000 is inf in float16" in f.message
    ns = _run_fix(f.fixes[0].snippet, {"logits": logits.clone(), "forced": forced})
    stored = ns["logits"][0, 1].item()  # the dtype's own limit, or the value itself in float32
    assert stored in (torch.finfo(torch.float16).max, 1e5)


def _squash(p: torch.Tensor) -> torch.Tensor:
    return torch.log1p(-p.clamp(max=1 - 1e-7))  # mark: clamp_max


def test_a_bound_a_hair_below_one_that_float16_makes_one_is_named():
    probs = torch.sigmoid(torch.tensor([0.0, 20.0])).half()
    with dd.watch(numerics=True) as s:
        _squash(probs)
    f = _only(s.report, "finite-but-wrong")
    assert f.location.line == _line("clamp_max") and "is exactly 1 in float16" in f.message
    ns = _run_fix("out = " + f.fixes[0].snippet.split("return ", 1)[1], {"p": probs})
    assert torch.isfinite(ns["out"]).all()


# -- positions and casts ---------------------------------------------------------------------------
class Bucketer(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pos = torch.linspace(0, x.shape[-1] - 1, x.shape[-1], dtype=x.dtype)  # mark: linspace
        return pos


class Wrapper(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bucket = Bucketer()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bucket(x)


def test_positions_beyond_the_exact_integer_range_are_named_in_their_module():
    model = Wrapper().half()
    x = torch.zeros(1, 3000, dtype=torch.float16)
    with dd.watch(numerics=True) as s:
        model(x)
    f = _only(s.report, "finite-but-wrong")
    assert f.location.line == _line("linspace") and f.location.module == "bucket"
    assert "spacing" in f.message and "2048" in f.message
    ns = _run_fix(f.fixes[0].snippet, {"x": x})
    assert ns["pos"].unique().numel() == 3000  # every position distinct in float32


class Angles(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("freq", torch.tensor([1.0, 0.1]))

    def forward(self, n: int) -> torch.Tensor:
        steps = torch.arange(n, dtype=self.freq.dtype)  # mark: arange from a buffer's dtype
        return torch.outer(steps, self.freq)


def test_positions_whose_dtype_comes_from_a_buffer_name_where_the_buffer_was_cast():
    with dd.watch(numerics=True) as s:
        angles = Angles().to(torch.bfloat16)  # mark: module cast
        angles(600)
    f = _only(s.report, "finite-but-wrong")
    assert f.location.line == _line("arange from a buffer's dtype")
    assert f.operands[0].origin.line == _line("module cast")
    assert f"made bfloat16 at tests/test_numerics_opwatch.py:{_line('module cast')}" in f.message


def test_a_cast_that_moves_a_timestep_by_more_than_half_a_unit_is_named_with_the_uncast_fix():
    schedule = torch.tensor([2500.7, 1800.2])
    with dd.watch(numerics=True) as s:
        step = schedule[:1].to(torch.float16)  # mark: cast
    assert step.item() == 2500.0
    f = _only(s.report, "finite-but-wrong")
    assert f.location.line == _line("cast") and "2500.7" in f.message
    ns = _run_fix(f.fixes[0].snippet, {"schedule": schedule})
    assert abs(ns["step"].item() - 2500.7) < 1e-3


# -- results float32 would hold, updates the low dtype absorbs -----------------------------------
def test_an_energy_that_overflows_float16_outside_any_module_gets_the_upcast_fix():
    feat = torch.full((64, 32), 40.0).half()
    with dd.watch(numerics=True) as s:
        energy = (feat * feat).sum()  # mark: energy
    assert torch.isinf(energy)
    f = _only(s.report, "fp16-overflow")
    assert f.location.line == _line("energy") and "in float32 it reaches 3.28e+06" in f.message
    ns = _run_fix(f.fixes[0].snippet, {"feat": feat})
    assert torch.isfinite(ns["energy"])


def test_a_running_total_in_bfloat16_that_stops_moving_names_the_line_it_was_made():
    total = torch.zeros((), dtype=torch.bfloat16) + 600  # mark: total made
    with dd.watch(numerics=True) as s:
        for _ in range(8):
            total += torch.tensor(1.0, dtype=torch.bfloat16)  # mark: total update
    assert total.item() == 600  # every +1 was rounded away
    f = _only(s.report, "finite-but-wrong")
    assert f.location.line == _line("total update") and "leave the value unchanged in bfloat16" in f.message


def test_bfloat16_gradient_accumulation_that_drops_small_gradients_names_where_the_weights_were_cast():
    torch.manual_seed(0)
    with dd.watch(numerics=True) as s:
        layer = nn.Linear(32, 1, bias=False).to(torch.bfloat16)  # mark: cast weights
        for micro in range(6):
            x = torch.randn(8, 32, dtype=torch.bfloat16) + (300.0 if micro == 0 else 0.0)
            layer(x).float().mean().backward()  # mark: backward
    f = _only(s.report, "finite-but-wrong")
    assert f.location.line == _line("backward") and "gradient accumulation" in f.message
    born = [o.origin for o in f.operands if o.origin is not None]
    assert born and born[0].line == _line("cast weights")


# -- inside a forward: the first op that went inf in the step that ran it -------------------------
class Temperature(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.log_t = nn.Parameter(torch.tensor(12.0))
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.log_t.exp()  # mark: exp
        return self.proj(x) * scale


class Head(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(8, 8)
        self.temperature = Temperature()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.temperature(self.body(x))


def test_an_op_that_overflows_inside_a_forward_called_once_is_named_at_its_line_with_runs_module_name():
    model = Head().half()
    with dd.watch(numerics=True) as s, torch.no_grad():
        model(torch.randn(2, 8).half())
    (f,) = [f for f in s.report.findings if f.code == "fp16-overflow" and f.severity.value == "error"]
    assert f.location.module == "temperature"  # as `run` names it: no prefix from a float32 copy
    assert f.location.line == _line("exp") and f.location.file == str(HERE)
    assert "`self.log_t.exp()`" in f.message
    # bounded first: a float32 exp would meet float16 again in `self.proj(x) * scale`
    assert f.fixes[0].snippet == "scale = self.log_t.clamp(max=11.08).exp()"
    assert f.fixes[1].snippet == "scale = self.log_t.float().exp()"


# -- no noise --------------------------------------------------------------------------------------
def test_a_healthy_float16_gpt2_with_its_loss_and_a_metric_outside_gives_no_finding():
    pytest.importorskip("transformers")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    model = tiny_models.gpt2(head=True, n_layer=1, n_embd=32, n_head=2, vocab_size=64).half().eval()
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(0))
    with dd.watch(numerics=True) as s, torch.no_grad():
        total, count = torch.zeros((), dtype=torch.float32), 0
        for _ in range(3):
            logits = model(input_ids=ids).logits
            loss = nn.functional.cross_entropy(logits.float().view(-1, 64), ids.view(-1))
            probs = logits.softmax(-1)
            top = probs.max(-1).values.clamp(min=1e-4) * 0.5 + 0.25
            total += loss
            count += top.numel()
    noise = [(f.code, f.message[:100]) for f in s.report.findings if f.severity.value != "info"]
    assert noise == []


@pytest.mark.slow
def test_a_healthy_float16_unet_forward_gives_no_finding():
    pytest.importorskip("diffusers")
    logging.getLogger("diffusers").setLevel(logging.ERROR)
    unet = tiny_models.unet(sample_size=8).half().eval()
    sample = torch.randn(1, 4, 8, 8, dtype=torch.float16)
    context = torch.randn(1, 3, 32, dtype=torch.float16)
    with dd.watch(numerics=True) as s, torch.no_grad():
        for t in (999, 500):
            out = unet(sample, t, encoder_hidden_states=context).sample
            sample = sample - 0.1 * out
    noise = [(f.code, f.message[:100]) for f in s.report.findings if f.severity.value != "info"]
    assert noise == []


def test_the_op_checks_are_documented_by_the_monitor():
    assert "ops:" in inspect.getdoc(dd.numerics.NumericsMonitor)


# -- GradScaler on a loss with no graph ----------------------------------------------------------
def test_a_gradscaler_given_a_constant_loss_names_where_the_loss_was_made_and_the_skip_runs():
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    raised = None
    with dd.watch(numerics=True) as s:
        for step in range(2):
            out = model(torch.randn(3, 4))
            empty = torch.zeros((), requires_grad=True)  # mark: leaf loss
            objective = out.pow(2).mean() if step == 0 else empty
            opt.zero_grad()
            scaler.scale(objective).backward()  # mark: scale
            try:
                scaler.step(opt)
            except AssertionError as exc:  # torch: "No inf checks were recorded for this optimizer"
                raised = exc
                break
            scaler.update()
    assert raised is not None
    (f,) = [f for f in s.report.findings if f.data.get("misuse") == "detached-loss"]
    assert f.severity.value == "error" and f.location.line == _line("scale")
    assert f.operands[0].origin.line == _line("leaf loss")
    snippet = f.fixes[0].snippet
    assert snippet.startswith("if objective.grad_fn is None:")
    skipped = []
    for objective in (model(torch.randn(3, 4)).sum(), torch.zeros((), requires_grad=True)):
        exec(compile(f"for _ in [0]:\n{textwrap.indent(snippet, '    ')}\n    skipped.append(False)", "<fix>", "exec"),
             {"objective": objective, "skipped": skipped})  # fmt: skip
    assert skipped == [False]  # the model's loss goes on, the constant one is skipped
