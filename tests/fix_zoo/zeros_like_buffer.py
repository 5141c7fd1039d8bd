"""A sampler buffer made by zeros_like of an fp32 tensor, fed to an fp16 UNet."""

import torch

import tiny_models

unet = tiny_models.unet().eval().half()
x_in = torch.randn(1, 4, 16, 16)  # the sampler keeps its state in fp32 on purpose
prompt_embeds = torch.randn(1, 5, 32, dtype=torch.float16)
noise_pred = torch.zeros_like(x_in)
# FIX HERE
with torch.no_grad():
    out = unet(noise_pred, 10, encoder_hidden_states=prompt_embeds).sample
