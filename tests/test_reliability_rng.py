"""issue 13, item 3: the numerics monitor's float32 re-run of a producer must not consume the
user's random numbers: dropout masks of later steps are the same with and without it."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from dtype_doctor.numerics import monitor_numerics


class Noisy(torch.nn.Module):
    """An fp16 producer that overflows (so it is re-run in float32) and draws random numbers."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.dropout(self.lin(x) * 6e4, 0.5, self.training)


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.noisy = Noisy()
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.noisy(x))


def masks(monitored: bool, steps: int = 4) -> tuple[list[torch.Tensor], torch.Tensor, list[str]]:
    torch.manual_seed(0)
    model = Net().half().train()
    x = torch.ones(4, 8, dtype=torch.float16)
    outs, codes = [], []
    if monitored:
        with monitor_numerics(model) as mon:
            outs = [model(x) == 0 for _ in range(steps)]
        codes = mon.report.codes()
    else:
        outs = [model(x) == 0 for _ in range(steps)]
    return outs, torch.rand(4), codes


def test_the_float32_rerun_leaves_the_global_rng_as_it_was():
    plain, plain_next, _ = masks(False)
    watched, watched_next, codes = masks(True)
    assert "fp16-overflow" in codes, "the producer was found, so it was re-run in float32"
    for step, (a, b) in enumerate(zip(plain, watched, strict=True)):
        # before: the re-run drew its own dropout mask, so every later step's masks differed
        assert torch.equal(a, b), f"step {step}: dropout mask changed by the monitor"
    assert torch.equal(plain_next, watched_next)
