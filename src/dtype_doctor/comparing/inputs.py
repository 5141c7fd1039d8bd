"""The user's inputs, in any accepted form, as real tensors on the device."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from ..loading import TensorSpec, parse_input, spec_from_tuple


def make_inputs(inputs: Any, device: torch.device, seed: int) -> tuple[tuple, dict]:
    """Anything the user can pass as inputs → (args, kwargs) of real tensors on `device`."""
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        if isinstance(inputs, Mapping):
            return (), {k: _one_input(v, device) for k, v in inputs.items()}
        if (
            isinstance(inputs, tuple)
            and len(inputs) == 2
            and isinstance(inputs[0], (tuple, list))
            and isinstance(inputs[1], Mapping)
        ):
            return tuple(_one_input(v, device) for v in inputs[0]), {
                k: _one_input(v, device) for k, v in inputs[1].items()
            }
        if isinstance(inputs, (list, tuple)) and not _is_spec_tuple(inputs):
            return tuple(_one_input(v, device) for v in inputs), {}
        return (_one_input(inputs, device),), {}
    finally:
        torch.random.set_rng_state(gen_state)


def _is_spec_tuple(value: Any) -> bool:
    return isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, str) for v in value)


def _one_input(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, TensorSpec):
        return value.make(device)
    if isinstance(value, str):
        return parse_input(value).make(device)
    if _is_spec_tuple(value):
        return spec_from_tuple(value).make(device)
    return value  # a Python scalar, None, a config object: passed as given


def batch_size(args: tuple, kwargs: dict) -> int:
    for t in [*args, *kwargs.values()]:
        if isinstance(t, torch.Tensor) and t.dim() > 0:
            return int(t.shape[0])
    return 1
