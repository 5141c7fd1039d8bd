"""A ControlNet made by ControlNetModel.from_unet and left fp32 beside an fp16 UNet."""

import torch
from diffusers import ControlNetModel

import tiny_models

unet = tiny_models.unet().eval().half()
controlnet = ControlNetModel.from_unet(unet, conditioning_embedding_out_channels=(16, 32)).eval()
latents = torch.randn(1, 4, 16, 16, dtype=torch.float16)
prompt_embeds = torch.randn(1, 5, 32, dtype=torch.float16)
cond = torch.randn(1, 3, 32, 32, dtype=torch.float16)
t = torch.tensor([10])
# FIX HERE
with torch.no_grad():
    down, mid = controlnet(
        latents, t, encoder_hidden_states=prompt_embeds, controlnet_cond=cond, return_dict=False
    )
    out = unet(
        latents,
        t,
        encoder_hidden_states=prompt_embeds,
        down_block_additional_residuals=down,
        mid_block_additional_residual=mid,
    )
