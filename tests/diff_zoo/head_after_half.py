"""An fp32 island: a classification head added after the backbone was converted with .half()."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 32)).half()
model.head = nn.Linear(32, 4)  # built in the default dtype, after .half()
x = torch.randn(2, 16, dtype=torch.float16)
with torch.no_grad():
    logits = model(x)
print(logits.dtype)
