"""The float32 re-run of a forward producer ("shadow"): a float32 copy of the module run on the
call's inputs cast up, with the random numbers the real call drew."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .apart import call_apart, float32_inputs, follow_float32, rng_state, set_rng_state
from .opscan import copy_without_hooks
from .stats import measured_tensors

MAX_PARAMS = 50_000_000  # above this no float32 copy of a producer is made


def twin(module: nn.Module, memo: dict) -> nn.Module | None:
    """A float32 copy of `module` without hooks; None when it is too big to copy."""
    if sum(p.numel() for p in module.parameters()) > MAX_PARAMS:
        return None
    return follow_float32(copy_without_hooks(module, memo).float(), module)


def run(twin: nn.Module, args: tuple, kwargs: dict, rng: tuple | None) -> Any:
    """`twin` on the inputs cast to float32, autocast off, drawing from `rng` (the states at the
    real call's start); the user's RNG is left where the real call left it."""
    device = next(iter(measured_tensors((args, kwargs))), torch.empty(0)).device.type
    after = rng_state()
    try:
        if rng is not None:
            set_rng_state(rng)
        with torch.no_grad(), torch.autocast(device_type=device, enabled=False):
            a, k = float32_inputs(args, kwargs)
            return call_apart(twin, *a, **k)
    finally:
        set_rng_state(after)
