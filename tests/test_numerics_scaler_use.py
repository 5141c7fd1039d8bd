"""GradScaler misuse, each a finding with the user's line and the loop in order (whose snippet is
executed here): clipping before unscale_, a scaler around bfloat16, step without update, a scale
that falls on every step. A loop in the right order gives none."""

from __future__ import annotations

import inspect
import json
import textwrap

import pytest
import torch

from dtype_doctor.cli import main
from dtype_doctor.numerics import monitor_numerics


def _loop(misuse: str, steps: int = 3) -> tuple[list, int]:
    """Train a Linear with a CPU GradScaler, wrong in one way; returns (findings, the wrong line)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    dtype = torch.bfloat16 if misuse == "bf16" else torch.float16
    lines = {}
    with monitor_numerics(model) as mon:
        for _ in range(steps):
            with torch.autocast("cpu", dtype=dtype):
                out = model(torch.randn(4, 8)).float()
            loss = (out * 1e38).sum() if misuse == "falls" else out.pow(2).mean()
            lines["bf16"] = inspect.currentframe().f_lineno + 1
            scaler.scale(loss).backward()
            if misuse != "clip":
                scaler.unscale_(opt)
            lines["clip"] = inspect.currentframe().f_lineno + 1
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            lines["step-without-update"] = inspect.currentframe().f_lineno + 1
            scaler.step(opt)
            if misuse != "step-without-update":
                lines["falls"] = inspect.currentframe().f_lineno + 1
                scaler.update()
            opt.zero_grad()
            if misuse == "step-without-update":
                break  # a second step() would raise (torch's own error)
    return mon.report.findings, lines.get(misuse, 0)


KINDS = {
    "clip": "clip-before-unscale",
    "bf16": "bf16",
    "step-without-update": "step-without-update",
    "falls": "scale-falls-every-step",
}


@pytest.mark.parametrize("misuse", sorted(KINDS))
def test_each_misuse_is_a_finding_at_the_users_line_with_the_loop_in_order(misuse):
    findings, line = _loop(misuse)
    (finding,) = [f for f in findings if f.code == "grad-scaler-misuse"]
    assert finding.data["misuse"] == KINDS[misuse]
    assert finding.location.file == __file__ and finding.location.line == line
    fix = finding.fixes[-1]  # the loop in order (a clip's finding first offers the unscale_ at its line)
    assert len(finding.fixes) == (2 if misuse == "clip" else 1)
    assert fix.snippet.index("unscale_") < fix.snippet.index("clip_grad_norm_") < fix.snippet.index("step(")
    assert fix.snippet.index("scaler.step(") < fix.snippet.index("scaler.update()")
    _run_fix(fix.snippet)


def _run_fix(snippet: str) -> None:
    """The emitted loop, executed on a real model: the optimizer steps and the weights move."""
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 8)
    before = model.weight.detach().clone()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(torch.randn(4, 8)).float().pow(2).mean()
    scaler = torch.amp.GradScaler("cpu")  # the loop names the user's scaler and optimizer (`opt`)
    exec(
        snippet,
        {
            "torch": torch,
            "model": model,
            "optimizer": optimizer,
            "loss": loss,
            "max_norm": 1.0,
            "scaler": scaler,
            "opt": optimizer,
        },
    )
    assert not torch.equal(model.weight, before)


def test_the_right_loop_order_gives_no_misuse():
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    with monitor_numerics(model) as mon:
        for _ in range(3):
            with torch.autocast("cpu", dtype=torch.float16):
                loss = model(torch.randn(4, 8)).float().pow(2).mean()
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
    assert mon.report.findings == []


def test_run_numerics_names_the_clip_line_in_the_script(tmp_path, capsys, monkeypatch):
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            """
            import torch
            model = torch.nn.Linear(8, 8)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            scaler = torch.amp.GradScaler("cpu")
            for step in range(3):
                with torch.autocast("cpu", dtype=torch.float16):
                    loss = model(torch.randn(4, 8)).float().pow(2).mean()
                scaler.scale(loss).backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(opt)
                scaler.update()
                opt.zero_grad()
            """
        )
    )
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--numerics", "--json", str(script)]) == 0
    (finding,) = json.loads(capsys.readouterr().out)["findings"]
    assert finding["data"]["misuse"] == "clip-before-unscale"
    assert finding["location"]["line"] == 10 and finding["location"]["file"].endswith("train.py")
    assert (
        "clip_grad_norm_ ran at train.py:10 on gradients still multiplied by GradScaler's scale (65536)"
        in (finding["message"])
    )


def test_clip_called_with_keywords_or_a_generator_still_clips_and_is_seen():
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 8)
    scaler = torch.amp.GradScaler("cpu")
    original = torch.nn.utils.clip_grad_norm_
    with monitor_numerics(model) as mon:
        with torch.autocast("cpu", dtype=torch.float16):
            loss = model(torch.randn(4, 8)).float().pow(2).mean()
        scaler.scale(loss).backward()
        norm = torch.nn.utils.clip_grad_norm_(parameters=(p for p in model.parameters()), max_norm=1.0)
        assert norm > 1.0  # the scaled norm, computed on the real gradients: the generator reached torch
        assert (
            torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in model.parameters()])) <= 1.0 + 1e-4
        )
    (finding,) = [f for f in mon.report.findings if f.code == "grad-scaler-misuse"]
    assert finding.data["misuse"] == "clip-before-unscale"
    assert torch.nn.utils.clip_grad_norm_ is original  # restored
