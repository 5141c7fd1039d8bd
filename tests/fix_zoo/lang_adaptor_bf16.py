"""A projector (`lang_adaptor`) built without a dtype in a bf16 runner (RDT-like)."""

import torch
from torch import nn

import tiny_models


class Runner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.backbone = tiny_models.gpt2(head=False)

    def forward(self, lang_tokens):
        h = self.lang_adaptor(lang_tokens)
        return self.backbone(inputs_embeds=h).last_hidden_state


runner = Runner().eval().to(torch.bfloat16)
runner.lang_adaptor = nn.Linear(48, 64)
lang_tokens = torch.randn(1, 5, 48, dtype=torch.bfloat16)
# FIX HERE
with torch.no_grad():
    out = runner(lang_tokens)
