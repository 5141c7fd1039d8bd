"""GradScaler health on a real torch.amp.GradScaler("cpu") training loop with forced inf gradients."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from torch import nn

from dtype_doctor.numerics import NumericsMonitor, watch_scaler
from dtype_doctor.report import Report


def _train(scaler: torch.amp.GradScaler, steps: int, inf_at: set[int], scheduler: bool = False) -> list[str]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1) if scheduler else None
    messages: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(steps):
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(torch.randn(4, 8)).float().mean()
            if step in inf_at:
                loss = loss * math.inf  # forced inf gradients
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            if sched is not None:
                sched.step()
    messages.extend(str(w.message) for w in caught)
    return messages


def test_skipped_steps_are_reported_with_their_numbers_and_the_scheduler_warning_explained():
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    report = Report(tool="numerics")
    with watch_scaler(scaler, report):
        warned = _train(scaler, steps=8, inf_at={0, 3, 5}, scheduler=True)
    # the torch warning this finding explains really happened
    assert any("lr_scheduler.step()" in m and "optimizer.step()" in m for m in warned)
    (finding,) = [f for f in report.findings if f.code == "grad-scaler-overflow"]
    assert finding.data["skipped_steps"] == [0, 3, 5]
    assert finding.data["steps"] == 8
    assert "steps 0, 3, 5" in finding.message
    assert "lr_scheduler.step()" in finding.message
    assert finding.severity.value == "warning"
    assert finding.data["scales"][-1] == 2.0**16 / 8
    assert "update" not in scaler.__dict__  # unwrapped


def test_numerics_monitor_watches_any_grad_scaler_and_unpatches():
    original = torch.amp.GradScaler.update
    scaler = torch.amp.GradScaler("cpu", init_scale=4.0)
    monitor = NumericsMonitor(backward=False).start()
    _train(scaler, steps=6, inf_at={1, 2, 3, 4, 5})
    report = monitor.stop()
    assert torch.amp.GradScaler.update is original
    skipped = next(f for f in report.findings if f.code == "grad-scaler-overflow")
    assert skipped.data["skipped_steps"] == [1, 2, 3, 4, 5]
    assert skipped.severity.value == "error"  # most steps skipped
    collapse = next(f for f in report.findings if f.code == "grad-scaler-collapse")
    assert collapse.data["min_scale"] == pytest.approx(0.125)
    assert collapse.location.step == 3  # 4 → 2 → 1 → 0.5 at step 3


def test_unbounded_growth_is_reported():
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**23, growth_interval=1)
    with watch_scaler(scaler) as monitor:
        _train(scaler, steps=4, inf_at=set())
    assert [f.code for f in monitor.report.findings] == ["grad-scaler-growth"]
    assert monitor.report.findings[0].data["scale"] == 2.0**27


def test_a_healthy_scaler_gives_no_findings():
    scaler = torch.amp.GradScaler("cpu")
    with watch_scaler(scaler) as monitor:
        _train(scaler, steps=3, inf_at=set())
    assert monitor.report.findings == []
