"""OneDiff: a UNet already .half() run under torch.autocast of another dtype: two precision managers."""

import torch

import tiny_models

unet = tiny_models.unet().eval().half()
sample = torch.randn(1, 4, 16, 16, dtype=torch.float16)
text = torch.randn(1, 5, 32, dtype=torch.float16)

with torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad():
    out = unet(sample, 3, encoder_hidden_states=text).sample
print(out.dtype)
