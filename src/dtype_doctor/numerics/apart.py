"""A copy of the user's module run apart from the user's own call (the numerics monitor's float32
re-runs, compare's shadows): with the random numbers the real call drew, leaving the user's streams
where they were, and outside the call's context variables."""

from __future__ import annotations

import contextvars
import random
import sys
from typing import Any

import torch
from torch import nn


def rng_state() -> tuple:
    """Every RNG state a forward may draw from: the CPU one, CUDA's if CUDA is initialised, NumPy's
    global one if NumPy is loaded (a model's random masks: a speech encoder's time masking draws
    from it) and Python's `random`."""
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    numpy = sys.modules.get("numpy")
    drawn = numpy.random.get_state() if numpy is not None else None
    return torch.get_rng_state(), cuda, drawn, random.getstate()


def set_rng_state(state: tuple) -> None:
    cpu, cuda, drawn, python = state
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)
    if drawn is not None:
        sys.modules["numpy"].random.set_state(drawn)
    random.setstate(python)


def call_apart(twin: nn.Module, *args: Any, **kwargs: Any) -> Any:
    """`twin(*args, **kwargs)` outside the real call's context variables: a library that gathers
    its layers' outputs into a collector set for the call it is in (transformers'
    `output_hidden_states`) would add the twin's float32 outputs to the user's."""
    return contextvars.Context().run(twin, *args, **kwargs)
