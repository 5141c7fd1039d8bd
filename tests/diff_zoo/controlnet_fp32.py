"""A ControlNet-style adapter left float32 next to a half UNet: its residuals reach the UNet."""

import torch
from torch import nn

import tiny_models


class Adapter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        return self.proj(x)


unet = tiny_models.unet().eval().half()
adapter = Adapter().eval()  # loaded separately, never converted
sample = torch.randn(1, 4, 16, 16, dtype=torch.float16)
text = torch.randn(1, 5, 32, dtype=torch.float16)
with torch.no_grad():
    hint = adapter(sample)
    out = unet(sample + hint, 3, encoder_hidden_states=text).sample
print(out.dtype)
