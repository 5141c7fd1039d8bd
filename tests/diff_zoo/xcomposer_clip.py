"""InternLM-XComposer: CLIP vision features (float32) fed to a language model loaded in float16."""

import torch

import tiny_models

vision = tiny_models.clip_vision(image_size=32, num_attention_heads=4).eval()
llm = tiny_models.llama(head=False, seed=1, vocab_size=100, hidden_size=32, intermediate_size=64).eval()
llm.half()  # from_pretrained(..., torch_dtype=torch.float16)
image = torch.randn(1, 3, 32, 32)

with torch.no_grad():
    image_embeds = vision(pixel_values=image).last_hidden_state
    out = llm(inputs_embeds=image_embeds).last_hidden_state
print(out.dtype, tuple(out.shape))
