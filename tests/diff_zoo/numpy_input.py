"""A tensor from numpy (float64 in, float32 by default elsewhere) into a half model."""

import numpy as np
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)).half()
arr = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
latents = torch.from_numpy(arr)
with torch.no_grad():
    print(model(latents).shape)
