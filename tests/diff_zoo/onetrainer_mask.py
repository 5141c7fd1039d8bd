"""OneTrainer: a float32 latent_mask (torch.ones without dtype=) concatenated into an fp16 UNet's input."""

import torch

import tiny_models

unet = tiny_models.unet(in_channels=5).eval().half()
latents = torch.randn(1, 4, 16, 16, dtype=torch.float16)
text = torch.randn(1, 5, 32, dtype=torch.float16)

latent_mask = torch.ones(1, 1, 16, 16)  # made like the latents, but without dtype=
with torch.no_grad():
    sample = torch.cat([latents, latent_mask], dim=1)
    out = unet(sample, 3, encoder_hidden_states=text).sample
print(out.dtype, tuple(out.shape))
