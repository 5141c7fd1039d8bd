"""An IP-Adapter-like branch: to_k_ip/to_v_ip added to the attention processors after .half()."""

import torch
from torch import nn

import tiny_models


class IPAttnProcessor(nn.Module):
    def __init__(self, dim: int, cross: int) -> None:
        super().__init__()
        self.to_k_ip = nn.Linear(cross, dim, bias=False)
        self.to_v_ip = nn.Linear(cross, dim, bias=False)

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, temb=None):
        context = hidden_states if encoder_hidden_states is None else encoder_hidden_states
        q = attn.to_q(hidden_states)
        out = torch.nn.functional.scaled_dot_product_attention(q, attn.to_k(context), attn.to_v(context))
        ip_out = torch.nn.functional.scaled_dot_product_attention(
            q, self.to_k_ip(context), self.to_v_ip(context)
        )
        return attn.to_out[0](out + ip_out)


unet = tiny_models.unet().eval().half()
procs = {}
for name, proc in unet.attn_processors.items():
    attn = unet.get_submodule(name.rsplit(".processor", 1)[0])
    procs[name] = IPAttnProcessor(attn.inner_dim, attn.cross_attention_dim) if "attn2" in name else proc
unet.set_attn_processor(procs)
latents = torch.randn(1, 4, 16, 16, dtype=torch.float16)
prompt_embeds = torch.randn(1, 5, 32, dtype=torch.float16)
# FIX HERE
with torch.no_grad():
    out = unet(latents, 10, encoder_hidden_states=prompt_embeds).sample
