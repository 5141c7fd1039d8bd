"""The cases of CASES.md reproduced with real diffusers / transformers models on CPU."""

from __future__ import annotations

import inspect
import logging

import pytest
import torch
from torch import nn

import tiny_models
from dtype_doctor import watch

diffusers = pytest.importorskip("diffusers")
transformers = pytest.importorskip("transformers")
logging.getLogger("diffusers").setLevel(logging.ERROR)

H = torch.float16


def here() -> int:
    return inspect.currentframe().f_back.f_lineno


@pytest.fixture(scope="module")
def unet16():
    return tiny_models.unet().eval().half()


@pytest.fixture(scope="module")
def vae16():
    return tiny_models.vae(block_out_channels=(32, 64)).eval().half()


def roles(finding):
    return {o.role: o for o in finding.operands}


def test_onetrainer_fp16_unet_fed_fp32_sample(unet16):
    ehs = torch.randn(1, 5, 32, dtype=H)
    with pytest.raises(RuntimeError, match="mat1 and mat2") as err, watch(model=unet16) as s:
        sample = torch.randn(1, 4, 16, 16)
        line = here()
        unet16(sample, 3, encoder_hidden_states=ehs)
    f = s.report.errors[0]
    assert (f.code, f.location.module, f.location.op) == (
        "matmul-dtype-mismatch",
        "time_embedding.linear_1",
        "F.linear",
    )
    assert f.location.file.endswith("diffusers/models/embeddings.py")
    inp, weight = roles(f)["input"], roles(f)["weight"]
    assert (inp.dtype, weight.dtype) == ("float32", "float16")
    assert weight.origin.name == "time_embedding.linear_1.weight"
    # diffusers casts the time embedding with `t_emb.to(dtype=sample.dtype)`: it is fp32 because
    # the user's `sample` is, so the origin is that input, not the earlier .float() in time_proj
    assert (inp.origin.kind, inp.origin.name, inp.origin.line) == ("input", "sample", line + 1)
    assert "time_embedding.linear_1" in err.value.__notes__[0]


def test_onetrainer_fix_mode_lists_every_mismatch_and_the_sample_origin(unet16):
    with watch(model=unet16, mode="fix") as s:
        sample = torch.randn(1, 4, 16, 16)
        line = here()
        out = unet16(sample, 3, encoder_hidden_states=torch.randn(1, 5, 32)).sample
    assert out.dtype == H
    by_module = {f.location.module: f for f in s.report.findings}
    conv = by_module["conv_in"]
    assert conv.code == "conv-bias-dtype-mismatch"
    origin = roles(conv)["input"].origin
    assert (origin.kind, origin.name, origin.line) == ("input", "sample", line + 1)
    assert origin.file.endswith("test_watch_models.py")
    to_k = by_module["down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_k"]
    assert roles(to_k)["input"].origin.name == "encoder_hidden_states"
    assert "up_blocks.1.attentions.1.transformer_blocks.0.attn2.to_v" in by_module


def test_onetrainer_fp16_vae_decoding_fp32_latents(vae16):
    with pytest.raises(RuntimeError, match="bias type"), watch(model=vae16) as s:
        latents = torch.randn(1, 4, 8, 8)
        line = here()
        vae16.decode(latents / 0.18215)
    f = s.report.errors[0]
    assert (f.code, f.location.module) == ("conv-bias-dtype-mismatch", "post_quant_conv")
    z = roles(f)["input"]
    assert z.dtype == "float32" and z.origin.kind == "input" and z.origin.name == "z"
    assert z.origin.op == "AutoencoderKL.decode" and z.origin.line == line + 1
    assert z.origin.chain[0].op == "torch.randn" and z.origin.chain[0].line == line - 1
    assert roles(f)["bias"].origin.name == "post_quant_conv.bias"


class MaskedUNet(nn.Module):
    """OneTrainer-style inpainting wrapper: latents and a mask concatenated into the UNet."""

    def __init__(self, unet):
        super().__init__()
        self.unet = unet

    def forward(self, latents, timestep, text):
        latent_mask = torch.ones(latents.shape[0], 1, *latents.shape[2:])  # no dtype=: float32
        return self.unet(torch.cat([latents, latent_mask], dim=1), timestep, encoder_hidden_states=text)


MASK_LINE = inspect.getsource(MaskedUNet).count("\n", 0, inspect.getsource(MaskedUNet).index("latent_mask ="))


def test_onetrainer_fp32_mask_concatenated_into_fp16_path():
    model = MaskedUNet(tiny_models.unet(in_channels=5).eval().half())
    latents = torch.randn(1, 4, 16, 16, dtype=H)
    with pytest.raises(RuntimeError) as err, watch(model=model) as s:
        model(latents, 3, torch.randn(1, 5, 32, dtype=H))
    mask_line = inspect.getsourcelines(MaskedUNet)[1] + MASK_LINE
    cat = next(f for f in s.report.findings if f.code == "silent-promotion")
    assert cat.location.op == "torch.cat" and cat.location.module == ""
    mask = next(o for o in cat.operands if o.dtype == "float32")
    assert mask.origin.op == "torch.ones" and mask.origin.line == mask_line
    assert "latent_mask" in cat.fixes[0].title
    # the fp32 leak makes the UNet fail in its time embedding; the note points back at the cat
    assert s.report.errors[0].location.module == "unet.time_embedding.linear_1"
    assert "earlier: [silent-promotion] torch.cat" in err.value.__notes__[0]
    # fix mode casts the mask at the cat, and the whole UNet then runs in fp16
    with watch(model=model, mode="fix") as s:
        out = model(latents, 3, torch.randn(1, 5, 32, dtype=H))
    assert out.sample.dtype == H
    assert [f.code for f in s.report.findings] == ["silent-promotion"]


def test_cogvlm_fp16_weights_with_fp32_biases():
    vit = tiny_models.vit().eval().half()
    for name, p in vit.named_parameters():
        if name.endswith("bias"):
            p.data = p.data.float()  # the biases stayed fp32 while the weights went fp16
    bias_error = r"Input type \(c10::Half\) and bias type \(float\)"
    with pytest.raises(RuntimeError, match=bias_error), watch(model=vit) as s:
        vit(pixel_values=torch.randn(1, 3, 16, 16, dtype=H))
    f = s.report.errors[0]
    assert (f.code, f.location.module) == (
        "conv-bias-dtype-mismatch",
        "embeddings.patch_embeddings.projection",
    )
    bias = roles(f)["bias"]
    assert bias.dtype == "float32" and bias.origin.kind == "parameter"
    assert bias.origin.name == "embeddings.patch_embeddings.projection.bias"
    assert roles(f)["input"].origin.name == "pixel_values"


class VisionLanguage(nn.Module):
    """InternLM-XComposer shape: fp32 vision tower, fp16 projection and language model."""

    def __init__(self):
        super().__init__()
        self.vision = tiny_models.clip_vision(seed=0)
        self.proj = nn.Linear(32, 32).half()
        lm = dict(
            n_embd=32,
            n_layer=1,
            n_head=2,
            n_positions=32,
            vocab_size=50,
            bos_token_id=50256,
            eos_token_id=50256,
        )
        self.lm = tiny_models.gpt2(seed=None, **lm).half()

    def forward(self, pixel_values, input_ids):
        image = self.proj(self.vision(pixel_values).last_hidden_state)
        text = self.lm.transformer.wte(input_ids)
        return self.lm(inputs_embeds=torch.cat([image, text], dim=1)).logits


def test_internlm_fp32_vision_features_into_fp16_language_model():
    model = VisionLanguage().eval()
    with pytest.raises(RuntimeError, match="mat1 and mat2"), watch(model=model) as s:
        pixels = torch.randn(1, 3, 16, 16)
        line = here()
        model(pixels, torch.tensor([[1, 2, 3]]))
    f = s.report.errors[0]
    assert (f.code, f.location.module) == ("matmul-dtype-mismatch", "proj")
    inp = roles(f)["input"]
    assert inp.dtype == "float32" and inp.origin.kind == "input" and inp.origin.name == "pixel_values"
    assert inp.origin.line == line + 1
    assert roles(f)["weight"].origin.name == "proj.weight"


def test_onediff_face_fp16_unet_under_bf16_autocast(unet16):
    bf16 = torch.autocast("cpu", dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="mixed dtype") as err, watch(model=unet16) as s, bf16:
        unet16(torch.randn(1, 4, 16, 16), 3, encoder_hidden_states=torch.randn(1, 5, 32))
    first, failing = s.report.findings[0], s.report.findings[-1]
    assert first.code == "autocast-half-conflict" and first.operands[0].dtype == "float16"
    assert failing.code == "autocast-half-conflict" and failing.location.op == "group_norm"
    assert roles(failing)["input"].dtype == "bfloat16" and roles(failing)["weight"].dtype == "float16"
    assert "autocast-half-conflict" in err.value.__notes__[0]
