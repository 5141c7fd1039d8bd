"""Made-up forward inputs for a model built from a Hugging Face config, when the user gives none."""

from __future__ import annotations

import inspect
from typing import Any

from ..inputs import TensorSpec


def _model_dtype(model: Any) -> str:
    from ..repair.policy import dominant_dtype

    try:
        return dominant_dtype(model) or "float32"
    except Exception:  # not a torch module, or one whose parameters() raises
        return "float32"


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

    floating = dtype or _model_dtype(model)  # most parameters' dtype: whatever one module added later holds
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
