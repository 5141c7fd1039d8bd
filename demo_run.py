import torch
from torch import nn

model = nn.Sequential(nn.Linear(4, 4), nn.ReLU()).half()
latents = torch.randn(2, 2, dtype=torch.float16)
mask = torch.zeros(2, 2)
batch = torch.cat([latents, mask], 1)
out = model(batch)
