"""An additive attention mask made without a dtype (float32) for a half attention."""

import torch
import torch.nn.functional as F

q = torch.randn(1, 2, 8, 16, dtype=torch.float16)
k = torch.randn(1, 2, 8, 16, dtype=torch.float16)
v = torch.randn(1, 2, 8, 16, dtype=torch.float16)
mask = torch.zeros(8, 8)
mask[:, 4:] = float("-inf")
out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
print(out.dtype)
