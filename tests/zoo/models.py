"""Build zoo models and their realistic inputs; load them for real the way users do.

`entries()` lists every transformers model type (base model class) and the diffusers models below;
`build(name)` makes the tiny fp32 model on CPU (raises with the reason when it cannot);
`inputs(model, dtype)` makes realistic inputs (ids with a left-padded attention mask, images, latents);
`planted(model)` the same with one floating input left in float32; `load(model, dtype, tmp)` a real
`save_pretrained` + `from_pretrained` on CPU.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import torch

from .configs import shrink

BATCH, SEQ = 2, 8
DIFFUSERS = {
    "UNet2DConditionModel": dict(
        sample_size=8,
        block_out_channels=(8, 16),
        layers_per_block=1,
        cross_attention_dim=16,
        attention_head_dim=4,
        norm_num_groups=4,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
    ),
    "UNet2DModel": dict(
        sample_size=8,
        block_out_channels=(8, 16),
        layers_per_block=1,
        norm_num_groups=4,
        down_block_types=("DownBlock2D", "AttnDownBlock2D"),
        up_block_types=("AttnUpBlock2D", "UpBlock2D"),
        attention_head_dim=4,
    ),
    "AutoencoderKL": dict(
        block_out_channels=(8, 16),
        norm_num_groups=4,
        latent_channels=4,
        sample_size=16,
        down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2,
    ),
    "VQModel": dict(  # its quantizer's cdist runs one float32 and one low operand under autocast
        block_out_channels=(8, 16),
        norm_num_groups=4,
        latent_channels=4,
        num_vq_embeddings=32,
        vq_embed_dim=4,
        sample_size=16,
        down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2,
    ),
    "DiTTransformer2DModel": dict(
        num_attention_heads=2,
        attention_head_dim=8,
        in_channels=4,
        num_layers=1,
        sample_size=8,
        patch_size=2,
        norm_num_groups=4,
        num_embeds_ada_norm=10,
    ),
    "SD3Transformer2DModel": dict(
        sample_size=8,
        patch_size=2,
        in_channels=4,
        num_layers=1,
        attention_head_dim=8,
        num_attention_heads=2,
        joint_attention_dim=16,
        caption_projection_dim=16,
        pooled_projection_dim=8,
        out_channels=4,
        pos_embed_max_size=16,
    ),
    "FluxTransformer2DModel": dict(
        patch_size=1,
        in_channels=16,
        num_layers=1,
        num_single_layers=1,
        attention_head_dim=8,
        num_attention_heads=2,
        joint_attention_dim=16,
        pooled_projection_dim=8,
        axes_dims_rope=(2, 2, 4),
    ),
    "PixArtTransformer2DModel": dict(
        sample_size=8,
        num_layers=1,
        patch_size=2,
        attention_head_dim=8,
        num_attention_heads=2,
        in_channels=4,
        out_channels=8,
        cross_attention_dim=16,
        caption_channels=16,
        norm_num_groups=4,
    ),
}


def entries() -> list[str]:
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    return sorted(MODEL_MAPPING_NAMES) + [f"diffusers:{n}" for n in DIFFUSERS]


def build(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if name.startswith("diffusers:"):
        import diffusers

        cls = getattr(diffusers, name.split(":")[1])
        return cls(**DIFFUSERS[name.split(":")[1]]).eval()
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    names = MODEL_MAPPING_NAMES[name]
    cls = getattr(transformers, names[0] if isinstance(names, tuple) else names)  # funnel: (Model, BaseModel)
    config = shrink(transformers.AutoConfig.for_model(name))
    return cls(config).eval()


def _params(model: torch.nn.Module) -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(model.forward).parameters)


def _required(params: dict[str, inspect.Parameter]) -> set[str]:
    return {
        n
        for n, p in params.items()
        if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }


def _cfg(model: Any, *names: str, default: int) -> int:
    for config in (
        getattr(model, "config", None),
        getattr(getattr(model, "config", None), "vision_config", None),
    ):
        for name in names:
            value = getattr(config, name, None) if config is not None else None
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    return default


def inputs(model: torch.nn.Module, dtype: torch.dtype) -> dict[str, Any]:
    """Realistic inputs in `dtype` (floats) or raise ValueError naming what the zoo cannot make."""
    params = _params(model)
    name = type(model).__name__
    if name in (
        "UNet2DConditionModel",
        "UNet2DModel",
        "DiTTransformer2DModel",
        "SD3Transformer2DModel",
        "PixArtTransformer2DModel",
    ):
        return _diffusers_inputs(model, dtype)
    if name in ("AutoencoderKL", "VQModel"):
        return {"sample": torch.randn(BATCH, 3, 16, 16, dtype=dtype)}
    if name == "FluxTransformer2DModel":
        return {
            "hidden_states": torch.randn(1, 16, 16, dtype=dtype),
            "encoder_hidden_states": torch.randn(1, 4, 16, dtype=dtype),
            "pooled_projections": torch.randn(1, 8, dtype=dtype),
            "timestep": torch.tensor([0.5], dtype=dtype),
            "img_ids": torch.zeros(16, 3),
            "txt_ids": torch.zeros(4, 3),
        }
    out: dict[str, Any] = {}
    if "input_ids" in params:
        vocab = _cfg(model, "vocab_size", default=99)
        out["input_ids"] = torch.randint(3, max(4, min(vocab, 99)), (BATCH, SEQ))
        if "attention_mask" in params:
            mask = torch.ones(BATCH, SEQ, dtype=torch.long)
            mask[1, :3] = 0  # a left-padded second sequence, as a tokenizer makes it
            out["attention_mask"] = mask
        if "decoder_input_ids" in params and getattr(model.config, "is_encoder_decoder", False):
            out["decoder_input_ids"] = torch.randint(3, max(4, min(vocab, 99)), (BATCH, 4))
    if "pixel_values" in params:
        size = _cfg(model, "image_size", default=32)
        channels = _cfg(model, "num_channels", default=3)
        out["pixel_values"] = torch.randn(BATCH, channels, size, size, dtype=dtype)
    missing = _required(params) - set(out)
    if not out or missing:
        raise ValueError(f"forward needs inputs the zoo does not make: {sorted(missing) or list(params)[:4]}")
    return out


def _diffusers_inputs(model: torch.nn.Module, dtype: torch.dtype) -> dict[str, Any]:
    c = model.config
    size = c.sample_size
    out: dict[str, Any] = {}
    key = "hidden_states" if "hidden_states" in _params(model) else "sample"
    out[key] = torch.randn(BATCH, c.in_channels, size, size, dtype=dtype)
    out["timestep"] = torch.tensor([10, 20])
    dim = getattr(c, "cross_attention_dim", None) or getattr(c, "joint_attention_dim", None)
    dim = getattr(c, "caption_channels", None) or dim
    if dim and type(model).__name__ != "DiTTransformer2DModel":
        out["encoder_hidden_states"] = torch.randn(BATCH, 5, dim, dtype=dtype)
    if type(model).__name__ == "SD3Transformer2DModel":
        out["pooled_projections"] = torch.randn(BATCH, c.pooled_projection_dim, dtype=dtype)
    if type(model).__name__ == "DiTTransformer2DModel":
        out["class_labels"] = torch.tensor([1, 2])
    if type(model).__name__ == "PixArtTransformer2DModel":
        out["added_cond_kwargs"] = {"resolution": None, "aspect_ratio": None}
    return out


def planted(model: torch.nn.Module, dtype: torch.dtype) -> dict[str, Any] | None:
    """The realistic inputs with one floating input left in float32 (ids become fp32 embeddings)."""
    out = inputs(model, dtype)
    floats = [
        k for k, v in out.items() if isinstance(v, torch.Tensor) and v.is_floating_point() and v.dim() > 1
    ]
    if floats:
        out[floats[0]] = out[floats[0]].float()
        return out
    if "input_ids" in out and "inputs_embeds" in _params(model):
        emb = model.get_input_embeddings()
        width = getattr(emb, "embedding_dim", None)
        if width is None:
            return None
        out["inputs_embeds"] = torch.randn(*out.pop("input_ids").shape, width)
        return out
    return None


def load(model: torch.nn.Module, dtype: torch.dtype, folder: Path) -> torch.nn.Module:
    """A real `save_pretrained` + `from_pretrained` on CPU, in `dtype`."""
    model.save_pretrained(folder)
    if type(model).__module__.startswith("diffusers"):
        return type(model).from_pretrained(folder, torch_dtype=dtype).eval()
    return type(model).from_pretrained(folder, dtype=dtype).eval()
