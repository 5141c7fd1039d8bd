"""numerics: first producers of inf/NaN on real models, the keep-fp32 fix verified, backward, ranges."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))

from dtype_doctor.numerics import NumericsMonitor, find_fp32_set, keep_in_fp32, monitor_numerics
from dtype_doctor.report import Report
from numerics_models import T5_PRODUCER, VAE_PRODUCER, make_t5, make_vae


def _one(report: Report, code: str):
    found = [f for f in report.findings if f.code == code]
    assert len(found) == 1, report.codes()
    return found[0]


# -- float16 VAE (diffusers) -----------------------------------------------------------------
@pytest.fixture(scope="module")
def vae_case():
    vae = make_vae()
    torch.manual_seed(1)
    z = torch.randn(1, 4, 16, 16)
    with torch.no_grad():
        reference = vae.decode(z).sample
    assert reference.isfinite().all()
    vae.half()
    with monitor_numerics(vae) as monitor, torch.no_grad():
        for _ in range(2):  # the second step re-runs the producer in float32 (shadow)
            broken = vae.decode(z.half()).sample
    return vae, z, reference, broken, monitor


def test_vae_overflow_names_the_producer_not_the_modules_that_pass_it_on(vae_case):
    _, _, _, broken, monitor = vae_case
    assert not broken.isfinite().all()
    finding = _one(monitor.report, "fp16-overflow")
    assert finding.location.module == VAE_PRODUCER
    assert finding.location.module_type == "Conv2d"
    assert finding.location.op == "conv2d"
    assert finding.data["phase"] == "forward"
    assert finding.count == 2 and finding.data["steps"] == [1, 3]  # decode = post_quant_conv + decoder
    # its inputs were finite, and the modules downstream only passed the inf on
    assert finding.operands and finding.data["inputs"][0]["absmax"] < 100
    assert "decoder.conv_out" in finding.data["passed_on"]
    assert VAE_PRODUCER not in finding.data["passed_on"]


def test_vae_overflow_recommends_bf16_from_the_float32_rerun_and_the_vae_switch(vae_case):
    finding = _one(vae_case[4].report, "fp16-overflow")
    assert 65504 < finding.data["fp32_absmax"] < 3.39e38
    titles = [f.title for f in finding.fixes]
    assert "bfloat16" in titles[0]
    assert any("pipe.vae.to(torch.float32)" in f.snippet for f in finding.fixes)
    assert any("force_upcast" in f.snippet for f in finding.fixes)
    # the producer alone would be cast back to float16 and overflow again: its caller is kept
    assert any(
        f"keep_in_fp32(model, ['{VAE_PRODUCER.rpartition('.')[0]}'])" in f.snippet for f in finding.fixes
    )
    assert not any(f"keep_in_fp32(model, ['{VAE_PRODUCER}'])" in f.snippet for f in finding.fixes)


def test_vae_keep_fp32_set_applied_gives_the_float32_result(vae_case):
    vae, z, reference, _, _ = vae_case
    chosen, last = find_fp32_set(vae, lambda m: m.decode(z.half()))
    # the producer alone cannot be cast back to float16; its caller (the resnet with its norm) can
    assert chosen == [VAE_PRODUCER.rpartition(".")[0]]
    assert "fp16-overflow" not in last.codes()
    with keep_in_fp32(vae, chosen), torch.no_grad():
        fixed = vae.decode(z.half()).sample
    assert fixed.dtype == torch.float16 and fixed.isfinite().all()
    torch.testing.assert_close(fixed.float(), reference, atol=2e-2, rtol=2e-2)
    # removed: the model is back to float16 everywhere
    assert {p.dtype for p in vae.parameters()} == {torch.float16}


# -- T5 feed-forward (transformers) -----------------------------------------------------------
@pytest.fixture(scope="module")
def t5_case():
    model = make_t5()
    ids = torch.randint(0, 100, (2, 8), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        reference = model(input_ids=ids).last_hidden_state
    model.half()
    report = Report(tool="numerics")
    monitor = NumericsMonitor(report=report, model=model, every=1).start()
    with torch.no_grad():
        model(input_ids=ids)
        broken = model(input_ids=ids).last_hidden_state
    monitor.stop()
    return model, ids, reference, broken, report


def test_t5_feed_forward_overflow_found_with_transformers_switch(t5_case):
    _, _, _, broken, report = t5_case
    assert not broken.isfinite().all()
    finding = _one(report, "fp16-overflow")
    assert finding.location.module == T5_PRODUCER
    assert finding.location.op == "linear"
    assert finding.location.step == 0
    snippets = "\n".join(f.snippet for f in finding.fixes)
    assert 'T5EncoderModel._keep_in_fp32_modules = ["wi"]' in snippets
    assert finding.data["fp32_absmax"] > 65504


def test_t5_keep_fp32_set_applied_gives_finite_close_output(t5_case):
    model, ids, reference, _, _ = t5_case
    chosen, _ = find_fp32_set(model, lambda m: m(input_ids=ids))
    assert chosen == [T5_PRODUCER.rpartition(".")[0]]  # DenseReluDense: wo brings the range back
    with keep_in_fp32(model, chosen), torch.no_grad():
        fixed = model(input_ids=ids).last_hidden_state
    assert fixed.isfinite().all()
    torch.testing.assert_close(fixed.float(), reference, atol=5e-2, rtol=5e-2)


# -- backward ------------------------------------------------------------------------------------
def _tower(head_scale: float, dtype: torch.dtype = torch.float16) -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential()
    model.add_module("embed", nn.Linear(16, 64))
    model.add_module("act", nn.GELU())
    model.add_module("head", nn.Linear(64, 8))
    with torch.no_grad():
        model.head.weight.mul_(head_scale)
    return model.to(dtype)


def test_backward_only_overflow_is_found_in_backward():
    model = _tower(head_scale=300.0)
    x = (torch.randn(4, 16) * 1e-2).half()
    with monitor_numerics(model) as monitor:
        out = model(x)
        assert out.isfinite().all()  # the forward is fine ...
        (out.float().sum() * 1e4).backward()
        assert not model.embed.weight.grad.isfinite().all()  # ... the backward is not
    finding = _one(monitor.report, "fp16-overflow")
    assert finding.data["phase"] == "backward"
    assert finding.location.module == "head"  # its grad_input overflowed, its grad_output was finite
    assert finding.location.op == "linear (backward)"
    assert not [p for p in monitor.producers if p.phase == "forward"]
    assert any("GradScaler" in f.title for f in finding.fixes)


def test_weight_gradient_overflow_is_told_apart():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8)).half()
    x = torch.full((8192, 8), 4.0).half()  # the weight gradient sums 8192 rows of 4 x 4
    with monitor_numerics(model) as monitor:
        (model(x).float().sum() * 4).backward()
    producer = next(p for p in monitor.producers if p.phase == "backward")
    assert producer.kind == "weight-grad" and producer.param == "0.weight"
    finding = _one(monitor.report, "fp16-overflow")
    assert "0.weight" in finding.message


def test_loss_overflow_is_blamed_on_the_loss():
    model = _tower(head_scale=1.0)
    with monitor_numerics(model) as monitor:
        (model(torch.randn(2, 16).half()).sum() * 1e6).backward()  # float16 loss becomes inf
    producer = next(p for p in monitor.producers if p.phase == "backward")
    assert producer.kind == "loss"


# -- first, do no harm ----------------------------------------------------------------------------
def test_monitoring_changes_no_output_and_leaves_no_hooks():
    model = make_t5(overflow=False)
    ids = torch.randint(0, 100, (1, 8), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        plain = model(input_ids=ids).last_hidden_state
        with monitor_numerics(model) as monitor:
            watched = model(input_ids=ids).last_hidden_state
    assert torch.equal(plain, watched)
    assert monitor.report.findings == [] and monitor.internal_error is None
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def test_user_exception_propagates_unchanged():
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(5, 5))
    with pytest.raises(RuntimeError, match="cannot be multiplied"), monitor_numerics(model):
        model(torch.randn(2, 4))


def test_without_model_the_first_outer_module_is_the_root_and_every_n_steps():
    model = _tower(head_scale=1e6, dtype=torch.float32)  # outputs above 65504 would overflow float16
    with monitor_numerics(every=2) as monitor, torch.no_grad():
        for _ in range(3):
            model(torch.randn(2, 16))
    assert monitor.step_index == 3
    finding = _one(monitor.report, "fp16-headroom")
    assert finding.severity.value == "info"
    assert finding.location.module == "head"
    assert "would overflow in float16" in finding.message


def test_float16_underflow_of_gradients_is_reported():
    model = _tower(head_scale=1.0)
    with monitor_numerics(model) as monitor:
        (model(torch.randn(4, 16).half()).float().sum() * 1e-5).backward()
    finding = _one(monitor.report, "fp16-underflow")
    assert finding.data["phase"] == "backward"  # the forward's float16 outputs are fine
    assert set(finding.data["tensors"]) == {"embed.weight", "embed.bias", "head.weight", "head.bias"}
    assert any("GradScaler" in f.title for f in finding.fixes)


class _MaskedBlock(nn.Module):
    """Builds an additive causal mask (-inf) between modules, like many attention implementations."""

    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(16, 2, batch_first=True)
        self.out = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[1]
        mask = torch.full((n, n), float("-inf"), dtype=x.dtype).triu(1)
        h, _ = self.attn(x, x, x, attn_mask=mask, need_weights=False)
        return self.out(h)


@pytest.mark.parametrize("out_scale", [1.0, 3e3])
def test_an_additive_minus_inf_mask_is_not_a_producer(out_scale):
    torch.manual_seed(0)
    block = _MaskedBlock()
    with torch.no_grad():
        block.out.weight.mul_(out_scale)
    block = block.half().eval()
    assert all(p.isfinite().all() for p in block.parameters())
    with monitor_numerics(block) as monitor, torch.no_grad():
        y = block(torch.randn(1, 5, 16).half() * 30)
    if out_scale == 1.0:
        assert y.isfinite().all() and monitor.report.findings == []
    else:
        assert not y.isfinite().all()
        assert [p.path for p in monitor.producers] == ["out"]


def test_a_monitor_can_be_started_again():
    model = _tower(head_scale=1e4)
    x = torch.randn(4, 16).half() * 100
    monitor = NumericsMonitor(model=model, backward=False)
    for _ in range(2):
        monitor.start()
        with torch.no_grad():
            model(x)
        monitor.stop()
    assert [p.step for p in monitor.producers] == [0, 1]
    assert monitor.tensors_measured > 0
