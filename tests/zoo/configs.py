"""Tiny configs for every model type the pinned transformers ships, derived from each config class's
defaults by one generic shrinker (no hand-written per-model configs)."""

from __future__ import annotations

import contextlib
from typing import Any

_INTS = {
    # width
    "hidden_size": 32,
    "d_model": 32,
    "n_embd": 32,
    "embed_dim": 32,
    "dim": 32,
    "d_embed": 32,
    "projection_dim": 32,
    "text_embed_dim": 32,
    "vision_embed_dim": 32,
    "word_embed_proj_dim": 32,
    "embedding_size": 32,
    "hidden_dim": 32,
    # depth
    "num_hidden_layers": 2,
    "n_layer": 2,
    "num_layers": 2,
    "n_layers": 2,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "num_decoder_layers": 2,
    "num_encoder_layers": 2,
    # heads
    "num_attention_heads": 4,
    "n_head": 4,
    "n_heads": 4,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "num_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "attention_head_size": 8,
    "kv_channels": 8,
    "d_kv": 8,
    "qk_rope_head_dim": 4,
    "qk_nope_head_dim": 4,
    "v_head_dim": 8,
    "kv_lora_rank": 16,
    "q_lora_rank": 16,
    # feed forward
    "intermediate_size": 64,
    "ffn_dim": 64,
    "encoder_ffn_dim": 64,
    "decoder_ffn_dim": 64,
    "n_inner": 64,
    "d_ff": 64,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    "d_inner": 64,
    # vocab, positions, images
    "vocab_size": 99,
    "max_position_embeddings": 128,
    "n_positions": 128,
    "image_size": 32,
    "patch_size": 8,
    "num_channels": 3,
    # experts
    "num_experts": 4,
    "num_local_experts": 4,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "n_shared_experts": 1,
    "first_k_dense_replace": 1,
}
_FIXED = {"num_key_value_heads", "num_experts_per_tok", "n_shared_experts", "first_k_dense_replace"}


def shrink(config: Any, depth: int = 0) -> Any:
    """Make `config` tiny in place (and its sub-configs); returns it."""
    for name, small in _INTS.items():
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and (value > small or name in _FIXED):
            with contextlib.suppress(Exception):  # a read-only property
                setattr(config, name, min(value, small) if name not in _FIXED else small)
    for name in ("depths", "num_heads", "hidden_sizes", "embed_dims", "block_sizes"):
        value = getattr(config, name, None)
        if isinstance(value, (list, tuple)) and value and all(isinstance(v, int) for v in value):
            small = {"depths": 1, "num_heads": 2, "block_sizes": 1}.get(name)
            new = [small] * len(value) if small else [16 * (i + 1) for i in range(len(value))]
            setattr(config, name, new)
    if hasattr(config, "layer_types") and isinstance(config.layer_types, list):
        n = getattr(config, "num_hidden_layers", None)
        if isinstance(n, int):
            with contextlib.suppress(AttributeError):  # a read-only property (mamba, mamba2)
                config.layer_types = config.layer_types[:n]
    if getattr(config, "model_type", None) == "mamba2":  # its heads must tile expand * hidden_size
        config.head_dim, config.n_groups = config.expand * config.hidden_size // config.num_heads, 1
    vocab = getattr(config, "vocab_size", None)
    if isinstance(vocab, int):
        for name, value in list(vars(config).items()):
            if name.endswith("token_id") and isinstance(value, int) and value >= vocab:
                setattr(config, name, vocab - 1)
    if hasattr(config, "use_cache"):
        config.use_cache = False
    if depth < 3:
        for name in getattr(config, "sub_configs", {}) or {}:
            sub = getattr(config, name, None)
            if sub is not None and hasattr(sub, "to_dict"):
                shrink(sub, depth + 1)
    return config
