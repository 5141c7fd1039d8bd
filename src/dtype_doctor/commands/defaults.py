"""Made-up forward inputs for a model built from a Hugging Face config, when the user gives none."""

from __future__ import annotations

import inspect
from typing import Any

from ..dtypes import dtype_name
from ..inputs import TensorSpec


def _model_dtype(model: Any) -> str:
    """The floating dtype holding most of the model's parameters (float32 for a model without any):
    the dtype its own inputs would have, whatever a single module added later holds."""
    counts: dict[Any, int] = {}
    try:
        for p in model.parameters():
            if p.is_floating_point():
                counts[p.dtype] = counts.get(p.dtype, 0) + p.numel()
    except Exception:  # not a torch module, or one whose parameters() raises
        return "float32"
    return dtype_name(max(counts, key=counts.__getitem__)) if counts else "float32"


def default_inputs(model: Any, dtype: str | None) -> dict[str, TensorSpec] | None:
    """Inputs in the model's own dtype (a default must not manufacture a mismatch), or None."""
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return None
    config = getattr(model, "config", None)

    def get(name: str, default: int) -> int:
        value = getattr(config, name, None) if config is not None else None
        if value is None and isinstance(config, dict):
            value = config.get(name)
        return value if isinstance(value, int) else default

    floating = dtype or _model_dtype(model)
    if "input_ids" in params:
        return {"input_ids": TensorSpec((1, 16), "int64")}
    if "pixel_values" in params:
        size = get("image_size", 224)
        return {"pixel_values": TensorSpec((1, get("num_channels", 3), size, size), floating)}
    if "sample" in params:
        size = get("sample_size", 32)
        inputs = {"sample": TensorSpec((1, get("in_channels", 4), size, size), floating)}
        if "timestep" in params:
            inputs["timestep"] = TensorSpec((1,), "int64")
        if "encoder_hidden_states" in params:
            inputs["encoder_hidden_states"] = TensorSpec((1, 77, get("cross_attention_dim", 768)), floating)
        return inputs
    return None
