"""Issue 22 item 12: fix and guard leave a healthy model's numbers alone.

A model already in one dtype runs bitwise as before; an input the model's own code keeps in float32
(a diffusion timestep, an EDM noise level sigma) is not rounded to float16; nothing is kept in
float32 unless asked.
"""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

from torch import nn  # noqa: E402

import dtype_doctor as dd  # noqa: E402
import tiny_models  # noqa: E402


@pytest.fixture(scope="module")
def unet_fp16():
    return tiny_models.unet(sample_size=8).eval().half()


def _unet_inputs():
    torch.manual_seed(3)
    return torch.randn(1, 4, 8, 8).half(), torch.tensor([981.3]), torch.randn(1, 7, 32).half()


@torch.no_grad()
def test_fix_does_not_round_an_fp32_timestep(unet_fp16):
    sample, t, ehs = _unet_inputs()
    before = unet_fp16(sample, t, encoder_hidden_states=ehs).sample
    fixed = dd.fix(copy.deepcopy(unet_fp16), torch.float16, keep_fp32=())
    after = fixed(sample, t, encoder_hidden_states=ehs).sample
    assert torch.equal(after, before)  # 981.3 in fp16 is 981.5: the embedding would differ


@torch.no_grad()
def test_fix_default_keeps_nothing_in_fp32_and_a_consistent_model_is_bitwise_unchanged(unet_fp16):
    sample, t, ehs = _unet_inputs()
    before = unet_fp16(sample, t, encoder_hidden_states=ehs).sample
    fixed = dd.fix(copy.deepcopy(unet_fp16), torch.float16)
    assert fixed._dtype_doctor_fix.kept == []
    assert {p.dtype for p in fixed.parameters()} == {torch.float16}
    assert torch.equal(fixed(sample, t, encoder_hidden_states=ehs).sample, before)


@torch.no_grad()
def test_guard_on_a_consistent_unet_is_bitwise_unchanged(unet_fp16):
    sample, t, ehs = _unet_inputs()
    before = unet_fp16(sample, t, encoder_hidden_states=ehs).sample
    model = copy.deepcopy(unet_fp16)
    with dd.guard(model) as g:
        after = model(sample, t, encoder_hidden_states=ehs).sample
    assert torch.equal(after, before) and g.report.findings == []


class EDMPrecond(nn.Module):
    """EDM-style preconditioning: fp16 weights, sigma kept in fp32 on purpose for the c_* terms."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(8, dtype=torch.float16))
        self.net = nn.Linear(8, 8).half()

    def forward(self, x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        sigma = sigma.reshape(-1, 1)
        c_in = 1 / (sigma**2 + 0.25).sqrt()
        c_noise = sigma.log() / 4
        y = self.net((c_in * x.float()).half() * self.scale)
        return y.float() + c_noise


@torch.no_grad()
def test_guard_leaves_an_input_the_model_keeps_in_fp32_alone():
    torch.manual_seed(0)
    model = EDMPrecond()
    x, sigma = torch.randn(2, 8).half(), torch.tensor([80.123, 0.0021])
    before = model(x, sigma)
    with dd.guard(model) as g:
        after = model(x, sigma)
    assert torch.equal(after, before)
    assert [f.message for f in g.report.findings] == []


@torch.no_grad()
def test_guard_still_casts_a_stray_fp32_activation():
    torch.manual_seed(0)
    model = EDMPrecond()
    with dd.guard(model) as g:
        out = model.net(torch.randn(2, 8))  # an fp32 activation into an fp16 Linear: cast there
    assert out.dtype == torch.float16
    assert [f.code for f in g.report.findings] == ["module-input-cast"]


def test_defaults_are_documented():
    assert "keep_fp32" in dd.fix.__doc__ and "default: none" in dd.fix.__doc__
    assert "timestep" in dd.guard.__doc__ or "0-d/1-d" in dd.guard.__doc__
