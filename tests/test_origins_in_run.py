"""Origins of tensors made inside the run (issue 17, item 5): a tensor the user's code makes after
watch() began has the line that made it, even when its dtype came from a tensor made before; the
"untracked (created before watch() started)" label stays for tensors really made before."""

from __future__ import annotations

import inspect

import pytest
import torch
from torch import nn

import tiny_models
from dtype_doctor import watch

UNTRACKED = "untracked (created before watch() started)"


def here() -> int:
    return inspect.currentframe().f_back.f_lineno


def _operand(finding, role):
    return next(o for o in finding.operands if o.role == role)


def test_like_buffer_made_in_the_run_has_its_line_and_a_tensor_made_before_is_untracked():
    proj = nn.Linear(8, 8).half()
    x_in = torch.randn(2, 8)  # made before watch(): legitimately untracked
    with watch() as s:
        buf = torch.zeros_like(x_in)  # made in the run from an untracked tensor
        line = here() - 1
        with pytest.raises(RuntimeError):
            proj(buf)
        with pytest.raises(RuntimeError):
            torch.matmul(x_in, proj.weight.t())
    made_here, before = s.report.errors[0], s.report.errors[-1]
    origin = _operand(made_here, "input").origin
    while origin.kind == "input" and origin.chain:  # the model input made from `buf`
        origin = next(c for c in origin.chain if c.kind != "call")
    assert origin.name != UNTRACKED
    assert (origin.file, origin.line, origin.op) == ("tests/test_origins_in_run.py", line, "torch.zeros_like")
    assert origin.dtype == "float32"
    odd = next(o for o in before.operands if o.dtype == "float32").origin
    assert odd.name == UNTRACKED


def test_arithmetic_on_a_tensor_made_before_is_born_at_the_users_line_in_a_real_unet():
    unet = tiny_models.unet(sample_size=8).eval().half()
    scale = torch.ones(1)  # float32, made before the run
    sample = torch.randn(1, 4, 8, 8, dtype=torch.float16)
    with watch(model=unet) as s, torch.no_grad():
        emb = torch.randn(1, 8, 32, dtype=torch.float16)
        cond = scale * 3.0  # float32, made in the run from an untracked tensor
        line = here() - 1
        with pytest.raises(RuntimeError):
            unet(sample, torch.tensor([10]), encoder_hidden_states=emb * cond)
    seen = []
    for f in s.report.findings:
        for o in f.operands:
            origin = o.origin
            stack = [origin] if origin is not None else []
            while stack:
                c = stack.pop()
                seen.append(c)
                stack.extend(c.chain)
    lines = {(c.file, c.line) for c in seen}
    assert ("tests/test_origins_in_run.py", line) in lines, [(c.kind, c.op, c.file, c.line) for c in seen]
    assert not any(c.name == UNTRACKED for c in seen)
