"""A key/value cache allocated without a dtype (float32) filled and read by a half model."""

import torch
from torch import nn

torch.manual_seed(0)
proj = nn.Linear(16, 16).half()
cache = torch.zeros(1, 4, 16)  # preallocated, default dtype
for step in range(4):
    token = torch.randn(1, 16, dtype=torch.float16)
    cache[:, step] = proj(token)
out = proj(cache[:, -1])
print(out.dtype)
