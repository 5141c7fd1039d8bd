"""The float32 re-run of a module runs apart from the real call: it draws the random numbers the real
call drew, NumPy's and Python's too (a speech encoder's time masking draws from NumPy's global
generator), so a bfloat16 module that masks at random is not "finite but wrong" and the user's own
streams go on as without the tool; and it runs outside the call's context variables, so a library
that collects its layers' outputs for the call (transformers' hidden_states) collects the user's only."""

from __future__ import annotations

import random

import numpy as np
import torch
from torch import nn

import dtype_doctor as dd


class _TimeMasked(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        keep = np.random.rand(x.shape[1]) > 0.5
        shift = random.random()
        x = x * torch.from_numpy(keep).to(x.dtype)[None, :, None]
        return self.proj(x) + shift


def _draws(watched: bool) -> tuple[list, float, float, float]:
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    model = _TimeMasked().to(torch.bfloat16)
    x = torch.randn(2, 32, 16, dtype=torch.bfloat16)
    if watched:
        with dd.watch(model, numerics=True) as session:
            model(x)
        findings = [f.code for f in session.report.findings]
    else:
        model(x)
        findings = []
    return findings, np.random.rand(), random.random(), torch.rand(1).item()


def test_a_module_masking_with_numpy_is_compared_with_the_same_mask_and_the_streams_go_on() -> None:
    findings, *after_watched = _draws(watched=True)
    _, *after_plain = _draws(watched=False)
    assert "finite-but-wrong" not in findings, findings
    assert after_watched == after_plain


def test_a_float32_rerun_adds_nothing_to_the_hidden_states_a_library_collects() -> None:
    from transformers import CLIPTextConfig, CLIPTextModel

    config = CLIPTextConfig(
        vocab_size=99, hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4
    )
    model = CLIPTextModel(config).to(torch.float16).eval()
    ids = torch.randint(0, 99, (1, 7))
    with torch.no_grad():
        plain = model(ids, output_hidden_states=True).hidden_states
        with dd.watch(numerics=True):
            watched = model(ids, output_hidden_states=True).hidden_states
    assert [h.dtype for h in watched] == [h.dtype for h in plain] == [torch.float16] * 3
    for a, b in zip(watched, plain, strict=True):
        assert torch.equal(a, b)
