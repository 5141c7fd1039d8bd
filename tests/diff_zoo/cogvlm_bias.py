"""CogVLM: a half conversion that left the biases float32 (fp16 weights, fp32 biases)."""

import torch

import tiny_models

model = tiny_models.vit(image_size=32, num_hidden_layers=2, num_attention_heads=4).eval()
for name, param in model.named_parameters():
    if not name.endswith("bias"):
        param.data = param.data.half()  # the launcher converted weights only
pixels = torch.randn(1, 3, 32, 32, dtype=torch.float16)
with torch.no_grad():
    out = model(pixel_values=pixels).last_hidden_state
print(out.dtype)
