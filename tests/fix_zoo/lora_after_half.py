"""LoRA A/B adapters added by hand after .half() (as LLaMA-LoRA projects do without peft)."""

import torch
from torch import nn

import tiny_models


class LoraLinear(nn.Module):
    def __init__(self, base: nn.Linear, r: int = 4) -> None:
        super().__init__()
        self.base_layer = base
        self.lora_A = nn.Linear(base.in_features, r, bias=False)
        self.lora_B = nn.Linear(r, base.out_features, bias=False)

    def forward(self, x):
        return self.base_layer(x) + self.lora_B(self.lora_A(x))


model = tiny_models.llama(head=False).eval().half()
for layer in model.layers:
    layer.self_attn.q_proj = LoraLinear(layer.self_attn.q_proj)
    layer.self_attn.v_proj = LoraLinear(layer.self_attn.v_proj)
input_ids = torch.randint(0, 128, (1, 6))
# FIX HERE
with torch.no_grad():
    out = model(input_ids=input_ids)
