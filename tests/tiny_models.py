"""Tiny real diffusers/transformers models from small configs, random weights: for the tests, the demo
(examples/) and the benchmarks, which put this directory on sys.path to import it.

Each builder seeds torch with `seed` first (None: leaves the random state alone), builds the model in
fp32 and returns it as built (training mode: call `.eval()` where wanted). diffusers and transformers
are imported inside each function, so importing this module costs nothing. The transformers builders
take config overrides as keyword arguments.
"""

from __future__ import annotations

from typing import Any

import torch


def _seed(seed: int | None) -> None:
    if seed is not None:
        torch.manual_seed(seed)


def unet(*, in_channels: int = 4, out_channels: int = 4, sample_size: int = 16, seed: int | None = 0) -> Any:
    """A two-level UNet2DConditionModel (one cross-attention level), cross-attention width 32."""
    from diffusers import UNet2DConditionModel

    _seed(seed)
    return UNet2DConditionModel(
        in_channels=in_channels,
        out_channels=out_channels,
        block_out_channels=(32, 64),
        layers_per_block=1,
        cross_attention_dim=32,
        attention_head_dim=8,
        sample_size=sample_size,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        norm_num_groups=8,
    )


def vae(*, block_out_channels: tuple[int, ...] = (32,), sample_size: int = 32, seed: int | None = 0) -> Any:
    """An AutoencoderKL with one encoder/decoder block per entry of `block_out_channels`, 4 latent channels."""
    from diffusers import AutoencoderKL

    _seed(seed)
    levels = len(block_out_channels)
    return AutoencoderKL(
        in_channels=3,
        out_channels=3,
        block_out_channels=block_out_channels,
        down_block_types=("DownEncoderBlock2D",) * levels,
        up_block_types=("UpDecoderBlock2D",) * levels,
        layers_per_block=1,
        latent_channels=4,
        norm_num_groups=8,
        sample_size=sample_size,
    )


def gpt2_config(**overrides: Any) -> Any:
    """GPT2Config: width 64, 2 blocks, 4 heads, vocabulary 128, 32 positions, token 0 as bos/eos."""
    from transformers import GPT2Config

    base = dict(
        n_embd=64, n_layer=2, n_head=4, vocab_size=128, n_positions=32, bos_token_id=0, eos_token_id=0
    )
    return GPT2Config(**{**base, **overrides})


def gpt2(*, head: bool = True, seed: int | None = 0, **overrides: Any) -> Any:
    """GPT2LMHeadModel (head=False: the bare GPT2Model) on `gpt2_config(**overrides)`."""
    from transformers import GPT2LMHeadModel, GPT2Model

    config = gpt2_config(**overrides)
    _seed(seed)
    return (GPT2LMHeadModel if head else GPT2Model)(config)


def llama_config(**overrides: Any) -> Any:
    """LlamaConfig: width 64, MLP 128, 2 layers, 4 heads, vocabulary 128."""
    from transformers import LlamaConfig

    base = dict(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, vocab_size=128
    )
    return LlamaConfig(**{**base, **overrides})


def llama(*, head: bool = True, seed: int | None = 0, **overrides: Any) -> Any:
    """LlamaForCausalLM (head=False: the bare LlamaModel) on `llama_config(**overrides)`."""
    from transformers import LlamaForCausalLM, LlamaModel

    config = llama_config(**overrides)
    _seed(seed)
    return (LlamaForCausalLM if head else LlamaModel)(config)


# the vision transformers' defaults: width 32, MLP 64, 1 layer, 2 heads, 16×16 images in 8×8 patches
_VISION = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=1,
    num_attention_heads=2,
    image_size=16,
    patch_size=8,
)


def vit(*, add_pooling_layer: bool = True, seed: int | None = 0, **overrides: Any) -> Any:
    """ViTModel on the `_VISION` defaults with `overrides`."""
    from transformers import ViTConfig, ViTModel

    config = ViTConfig(**{**_VISION, **overrides})
    _seed(seed)
    return ViTModel(config, add_pooling_layer=add_pooling_layer)


def clip_vision(*, seed: int | None = 0, **overrides: Any) -> Any:
    """CLIPVisionModel on the `_VISION` defaults with `overrides`."""
    from transformers import CLIPVisionConfig, CLIPVisionModel

    config = CLIPVisionConfig(**{**_VISION, **overrides})
    _seed(seed)
    return CLIPVisionModel(config)
