"""No noise on healthy models: a clean fp16/bf16 forward and 20 autocast + GradScaler training
steps of GPT-2, Llama, a UNet, a VAE and a ViT under watch(numerics=True) give zero warnings.
(The UNet and VAE cases take ~10 s each on one core: marked slow.)"""

from __future__ import annotations

import logging

import pytest
import torch

import dtype_doctor as dd
import tiny_models
from dtype_doctor.render.console import summary_text

pytest.importorskip("transformers")
pytest.importorskip("diffusers")
logging.getLogger("transformers").setLevel(logging.ERROR)
logging.getLogger("diffusers").setLevel(logging.ERROR)

STEPS = 20


def _ids() -> torch.Tensor:
    return torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(0))


MODELS = {
    "gpt2": (
        lambda: tiny_models.gpt2(head=True, n_layer=1, n_embd=32, n_head=2, vocab_size=64),
        lambda m, dt: m(input_ids=_ids()).logits,
    ),
    "llama": (
        lambda: tiny_models.llama(
            head=True,
            vocab_size=64,
            hidden_size=32,
            intermediate_size=64,
            num_key_value_heads=4,
            num_hidden_layers=1,
        ),
        lambda m, dt: m(input_ids=_ids()).logits,
    ),
    "unet": (
        lambda: tiny_models.unet(sample_size=8),
        lambda m, dt: (
            m(
                torch.randn(1, 4, 8, 8, dtype=dt), 3, encoder_hidden_states=torch.randn(1, 3, 32, dtype=dt)
            ).sample
        ),
    ),
    "vae": (
        lambda: tiny_models.vae(sample_size=16),
        lambda m, dt: m(torch.randn(1, 3, 16, 16, dtype=dt)).sample,
    ),
    "vit": (
        lambda: tiny_models.vit(image_size=32, num_hidden_layers=1, num_attention_heads=4),
        lambda m, dt: m(pixel_values=torch.randn(1, 3, 32, 32, dtype=dt)).last_hidden_state,
    ),
}


def _noise(report) -> list[tuple[str, str | None, str]]:
    return [
        (f.code, f.location.module if f.location else None, f.message[:120])
        for f in report.findings
        if f.severity.value != "info"
    ]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n in ("unet", "vae") else n for n in MODELS]
)
def test_a_healthy_model_gives_no_warning_in_a_forward_and_20_training_steps(name, dtype):
    make, forward = MODELS[name]
    torch.manual_seed(0)
    model = make().to(dtype).eval()
    with dd.watch(model=model, numerics=True) as s, torch.no_grad():
        forward(model, dtype)
    assert _noise(s.report) == [], summary_text(s.report)

    torch.manual_seed(0)
    model = make().train()  # fp32 master weights, autocast computes in the low dtype
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu", enabled=dtype == torch.float16)
    with dd.watch(model=model, numerics=True) as s:
        for _ in range(STEPS):
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=dtype):
                out = forward(model, torch.float32)
            scaler.scale(out.float().pow(2).mean()).backward()
            scaler.step(optimizer)
            scaler.update()
    assert _noise(s.report) == [], summary_text(s.report)
