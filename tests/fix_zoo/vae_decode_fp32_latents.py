"""fp32 latents from the sampler decoded by an fp16 VAE, the scaling inside the call."""

import torch

import tiny_models

vae = tiny_models.vae().eval().half()
latents = torch.randn(1, 4, 16, 16)  # the scheduler's state stays fp32
# FIX HERE
with torch.no_grad():
    image = vae.decode(latents / vae.config.scaling_factor).sample
