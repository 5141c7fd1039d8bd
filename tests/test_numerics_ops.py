"""numerics in one pass: a steady-state step costs one fused `aminmax` per measured tensor (counted
with a TorchDispatchMode: the same on any device), and what it finds stays exact."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))

import op_counting
import tiny_models
from dtype_doctor import cli
from dtype_doctor.numerics import NumericsMonitor, monitor_numerics


def test_a_steady_state_gpt2_step_adds_at_most_one_op_per_module_output_reading_each_once():
    model = tiny_models.gpt2(n_layer=2, n_embd=64, n_head=4, n_positions=32).to(torch.bfloat16).eval()
    ids = torch.randint(0, 128, (2, 32), generator=torch.Generator().manual_seed(0))

    def step() -> None:
        with torch.no_grad():
            model(input_ids=ids)

    monitor = NumericsMonitor(model=model, scaler=False)
    cost = op_counting.extra_cost(step, monitor.start, monitor.stop, warmup=2, steps=3)
    added = {op for op, n in cost.monitored.by_op.items() if n > cost.plain.by_op.get(op, 0)}
    assert added == {"aminmax", "stack"}  # no copies, no float32 casts, no per-tensor bookkeeping
    assert cost.monitored.by_op["stack"] - cost.plain.by_op.get("stack", 0) == 3  # one read per step
    assert cost.ops_per_output <= 1.0
    assert cost.bytes_per_output_byte <= 1.0


class _Transposed(nn.Module):
    """Two linears with a transpose (a view of all of the first output) between them."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(8, 8)
        self.second = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(self.first(x).transpose(1, 2))


def test_an_overflow_in_a_range_only_step_names_its_producer_and_the_operand_as_seen():
    torch.manual_seed(0)
    model = _Transposed().half()
    x = torch.randn(2, 4, 8).half()
    with monitor_numerics(model, underflow_every=4) as monitor, torch.no_grad():
        for _ in range(2):
            model(x)
        model.second.weight.mul_(1e5)  # overflows at step 2: a step that measures range only
        with op_counting.CountOps() as ops:
            model(x)
        assert ops.by_op["aminmax"] == 3  # x, the two outputs: the transposed view repeats a row
        model(x)  # the next outermost call ends step 2
    (producer,) = [p for p in monitor.producers if p.step == 2]
    assert (producer.path, producer.kind, producer.value) == ("second", "module", "inf")
    (finding,) = [f for f in monitor.report.findings if f.code == "fp16-overflow"]
    (operand,) = finding.operands
    assert operand.shape == [2, 8, 4]  # the view's own shape, though its row is the first output's
    assert operand.name.startswith("abs-max ") and "smallest non-zero" not in operand.name  # not counted
    assert finding.data["inputs"][0]["min_nonzero"] is None


@pytest.mark.parametrize("command", ["numerics", "run"])
def test_the_help_says_which_checks_are_sampled(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split()).replace("- ", "-")  # argparse wraps at hyphens
    assert "one fused min/max" in text and "once per step" in text
    assert "one in 100" in text and "first low-precision step" in text and "only after a finding" in text
