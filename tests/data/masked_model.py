"""The OneTrainer latent_mask shape: a float32 mask made inside an fp16 model's forward."""

import torch
from torch import nn


class Masked(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(5, 3)

    def forward(self, latent):
        mask = torch.ones(latent.shape[0], 1, device=latent.device)  # float32 whatever the model dtype
        return self.proj(torch.cat([latent, mask], dim=1))
