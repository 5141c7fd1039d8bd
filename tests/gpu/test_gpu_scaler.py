"""GradScaler on CUDA: fp16 gradients are named by watch, and the numerics scaler monitor sees
the loss scale back off on overflow and the skipped optimizer steps."""

from __future__ import annotations

import pytest
import torch
from torch import nn

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device (tests/gpu runs on a GPU machine)", allow_module_level=True)

from dtype_doctor import watch
from dtype_doctor.numerics import ScalerMonitor


def test_watch_names_the_fp16_parameters_gradscaler_refuses():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1)).cuda()
    model[2].half()  # a half-converted head, as adapters made in the base model's dtype are
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cuda")
    x = torch.randn(4, 8, device="cuda")
    with watch(model=model) as session, pytest.raises(ValueError, match="unscale FP16 gradients"):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x).float().pow(2).mean()
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
    (finding,) = [f for f in session.report.findings if f.code == "fp16-gradient-unscale"]
    assert set(finding.data["fp16_params"]) == {"2.weight", "2.bias"}
    assert finding.data["total_params"] == 4


def test_the_scaler_monitor_sees_overflow_backoff_and_skipped_steps():
    torch.manual_seed(0)
    model = nn.Linear(8, 8).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cuda", init_scale=2.0**40)  # overflows at first: backs off
    x = torch.randn(4, 8, device="cuda")
    with ScalerMonitor() as monitor:
        for _ in range(6):
            optimizer.zero_grad()
            with torch.autocast("cuda", dtype=torch.float16):
                loss = model(x).float().pow(2).sum() * 1e4
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
    assert scaler.get_scale() < 2.0**40
    history = next(iter(monitor.histories.values()))
    assert len(history.scales) == 6  # every update() of the CUDA scaler was seen
    assert history.skipped and history.skipped[0] == 0  # the first step overflowed: skipped, backed off
