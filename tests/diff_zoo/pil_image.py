"""An image from PIL through numpy: float32 pixels into a half conv net."""

import numpy as np
import torch
from PIL import Image
from torch import nn

torch.manual_seed(0)
net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3)).eval().half()
image = Image.fromarray((np.random.default_rng(0).random((32, 32, 3)) * 255).astype("uint8"))
pixels = torch.from_numpy(np.asarray(image, dtype=np.float32) / 255.0).permute(2, 0, 1)[None]
with torch.no_grad():
    feats = net(pixels)
print(feats.dtype)
