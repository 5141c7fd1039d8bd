"""A LoRA adapter injected after the base model was converted with .half(): its new layers are float32."""

import torch
from torch import nn


class LoRA(nn.Module):
    def __init__(self, base: nn.Linear, rank: int = 2) -> None:
        super().__init__()
        self.base = base
        self.down = nn.Linear(base.in_features, rank, bias=False)
        self.up = nn.Linear(rank, base.out_features, bias=False)

    def forward(self, x):
        return self.base(x) + self.up(self.down(x))


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8)).half()
for i in (0, 2):
    model[i] = LoRA(model[i])
x = torch.randn(2, 8, dtype=torch.float16)
print(model(x).dtype)
