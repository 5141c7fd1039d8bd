"""fix and guard on the seed cases that reproduce on CPU: they fail as published, run after the repair,
and match the fp32 reference within a stated tolerance."""

from __future__ import annotations

import copy
import logging

import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
transformers = pytest.importorskip("transformers")

from torch import nn  # noqa: E402

import dtype_doctor as dd  # noqa: E402
import tiny_models  # noqa: E402

# fp16 on CPU against fp32: relative error (max |diff| / max |ref|) stays well under this
REL_TOL = 2e-2


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.detach().float(), ref.detach().float()
    return float((out - ref).abs().max() / ref.abs().max())


@pytest.fixture(scope="module")
def unet_fp32():
    # 4 latent channels + the OneTrainer latent_mask
    return tiny_models.unet(in_channels=5, out_channels=4, sample_size=8).eval()


@pytest.fixture(scope="module")
def vae_fp32():
    return tiny_models.vae().eval()


@pytest.fixture(scope="module")
def gpt2_fp32():
    return tiny_models.gpt2().eval()


def onetrainer_inputs():
    """fp16 latents, an fp32 mask made with torch.ones (default dtype), fp32 text embeddings."""
    torch.manual_seed(1)
    latents = torch.randn(1, 4, 8, 8).half()
    mask = torch.ones(1, 1, 8, 8)  # the GenerateImageLike latent_mask: float32 by default
    sample = torch.cat([latents, mask], dim=1)  # silently promoted to float32
    return sample, torch.tensor([10.0]), torch.randn(1, 7, 32)


def test_onetrainer_unet_fails_then_runs_after_fix(unet_fp32):
    sample, timestep, ehs = onetrainer_inputs()
    ref = unet_fp32(sample.float(), timestep, encoder_hidden_states=ehs).sample
    unet = copy.deepcopy(unet_fp32).half()
    with pytest.raises(RuntimeError, match="mat1 and mat2 must have the same dtype"):
        unet(sample, timestep, encoder_hidden_states=ehs)
    dd.fix(unet, torch.float16, keep_fp32=("norm",))
    with torch.no_grad():
        out = unet(sample, timestep, encoder_hidden_states=ehs).sample
    assert out.dtype == torch.float16
    assert all(p.dtype == torch.float32 for n, p in unet.named_parameters() if "norm" in n)
    assert rel_err(out, ref) < REL_TOL


def test_onetrainer_unet_runs_under_guard_and_logs_each_cast_once(unet_fp32, caplog):
    sample, timestep, ehs = onetrainer_inputs()
    ref = unet_fp32(sample.float(), timestep, encoder_hidden_states=ehs).sample
    unet = copy.deepcopy(unet_fp32).half()
    with caplog.at_level(logging.WARNING, logger="dtype_doctor"), dd.guard(unet) as g, torch.no_grad():
        out = unet(sample, timestep, encoder_hidden_states=ehs).sample
        unet(sample, timestep, encoder_hidden_states=ehs)
    assert rel_err(out, ref) < REL_TOL
    casts = {f.location.module: f for f in g.report.findings}
    assert "time_embedding.linear_1" in casts  # the op the real run fails on
    assert casts["time_embedding.linear_1"].operands[0].dtype == "float32"
    assert casts["time_embedding.linear_1"].count == 2  # counted every time...
    logged = [r for r in caplog.records if "time_embedding.linear_1" in r.getMessage()]
    assert len(logged) == 1  # ...logged once
    # removed on exit: the model fails again as it did
    with pytest.raises(RuntimeError, match="must have the same dtype"):
        unet(sample, timestep, encoder_hidden_states=ehs)


def test_fp16_vae_decoding_fp32_latents_runs_under_guard(vae_fp32):
    torch.manual_seed(2)
    latents = torch.randn(1, 4, 8, 8)
    ref = vae_fp32.decode(latents).sample
    vae = copy.deepcopy(vae_fp32).half()
    with pytest.raises(RuntimeError, match=r"Input type \(float\) and bias type \(c10::Half\)"):
        vae.decode(latents)
    with dd.guard(vae) as g, torch.no_grad():
        out = vae.decode(latents).sample
    assert "post_quant_conv" in {f.location.module for f in g.report.findings}
    assert rel_err(out, ref) < REL_TOL


def test_cogvlm_fp16_weights_fp32_biases_run_after_fix(gpt2_fp32):
    ids = torch.randint(0, 128, (1, 12))
    ref = gpt2_fp32(ids).logits
    model = copy.deepcopy(gpt2_fp32)
    for name, p in model.named_parameters():
        if not name.endswith("bias"):
            p.data = p.data.half()  # a half-done conversion: weights fp16, biases fp32
    with pytest.raises(RuntimeError, match=r"same dtype|expected scalar type Half but found Float"):
        model(ids)
    dd.fix(model, torch.float16)
    assert {p.dtype for n, p in model.named_parameters() if "ln_" not in n} == {torch.float16}
    with torch.no_grad():
        out = model(ids).logits
    assert rel_err(out, ref) < REL_TOL


def test_internlm_xcomposer_fp32_vision_features_into_fp16_lm():
    torch.manual_seed(3)
    lm_fp32 = tiny_models.llama(seed=None).eval()  # InternLM is a Llama-family LM
    vision = nn.Linear(16, 64)  # fp32 vision encoder + projection
    features = vision(torch.randn(1, 5, 16))
    ref = lm_fp32(inputs_embeds=features).logits
    lm = copy.deepcopy(lm_fp32).half()  # loaded with torch_dtype=float16
    with pytest.raises(RuntimeError, match="to have the same dtype"):
        lm(inputs_embeds=features)
    dd.fix(lm, "fp16")
    with torch.no_grad():
        out = lm(inputs_embeds=features).logits
    assert rel_err(out, ref) < REL_TOL


def test_fix_keeps_fp32_islands_exact_and_is_repeatable():
    model = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 2))
    with torch.no_grad():
        model[1].weight.fill_(1 + 1e-6)  # not representable in fp16: must not pass through it
    dd.fix(model, torch.bfloat16, keep_fp32=("norm",))
    assert model[1].weight.dtype == torch.float32
    assert model[1].weight[0].item() == torch.tensor(1 + 1e-6).item() != 1.0  # bf16 would round it to 1.0
    assert model[0].weight.dtype == torch.bfloat16
    assert model._dtype_doctor_fix.kept == ["1"]
    out = model(torch.randn(3, 4))  # fp32 input, fp32 island inside a bf16 model: casts at the borders
    assert out.dtype == torch.bfloat16
    dd.fix(model, torch.float16, keep_fp32=())  # a new policy replaces the old one and its hooks
    assert model[1].weight.dtype == torch.float16
    assert model(torch.randn(3, 4)).dtype == torch.float16


def test_fix_honours_transformers_keep_in_fp32_modules():
    class Tiny(nn.Module):
        _keep_in_fp32_modules = ("wo",)

        def __init__(self):
            super().__init__()
            self.wi = nn.Linear(4, 4)
            self.wo = nn.Linear(4, 4)

        def forward(self, x):
            return self.wo(self.wi(x))

    model = dd.fix(Tiny(), torch.float16, keep_fp32=())
    assert model.wi.weight.dtype == torch.float16 and model.wo.weight.dtype == torch.float32
    assert model(torch.randn(2, 4)).dtype == torch.float16


def test_float8_storage_is_left_alone_by_fix_guard_and_audit():
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    model[0].weight.data = model[0].weight.data.to(torch.float8_e4m3fn)  # a quantized weight + its bias
    dd.fix(model, torch.float16)
    assert [p.dtype for p in model.parameters()] == [torch.float8_e4m3fn] + [torch.float16] * 3
    assert "weight-bias-dtype-mismatch" not in dd.audit(model).codes()
    with dd.guard(model) as g:  # only the fp16 layers are guarded, nothing is cast to float8
        assert {type(m) for m in model} == {nn.Linear} and len(g._handles) == 2
