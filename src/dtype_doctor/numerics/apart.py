"""A copy of the user's module run apart from the user's own call (the numerics monitor's float32
re-runs, compare's shadows): with the random numbers the real call drew, leaving the user's streams
where they were, and outside the call's context variables.

A float32 reference must compute what the module computes in float32, so the dtypes a module
carries outside its tensors follow the copy: a low dtype passed as an argument (diffusers'
`hidden_dtype=hidden_states.dtype`) or kept as an attribute (a quantization state's `.dtype`,
a module's `self.dtype = ...`) becomes float32 too, or the copy casts back to the low dtype and
meets its own float32 weights."""

from __future__ import annotations

import contextvars
import random
import sys
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from ..tensors import map_tensors

_LOW = (torch.float16, torch.bfloat16)


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


def _wide(value: Any) -> Any:
    """A float16/bfloat16 dtype as float32; anything else as it is."""
    return torch.float32 if isinstance(value, torch.dtype) and value in _LOW else value


def float32_inputs(args: tuple, kwargs: Mapping[str, Any]) -> tuple[tuple, dict]:
    """A call's inputs for a float32 re-run: floating tensors as float32 copies (detached), low
    dtypes passed as arguments as float32."""
    up = lambda t: t.detach().to(torch.float32, copy=True) if t.is_floating_point() else t  # noqa: E731
    a, k = map_tensors((tuple(args), dict(kwargs)), up)
    return tuple(_wide(v) for v in a), {name: _wide(v) for name, v in k.items()}


def follow_float32(twin: nn.Module, original: nn.Module) -> nn.Module:
    """`twin` (a `.float()` deep copy of `original`) with the low dtypes its modules keep as
    attributes, directly or in a plain object they hold (a config, a quantization state), made
    float32. An object the copy shares with the original (its `__deepcopy__` returned itself) is
    the user's and left alone."""
    for mine, theirs in zip(twin.modules(), original.modules(), strict=False):
        for name, value in list(vars(mine).items()):
            if isinstance(value, torch.dtype):
                if value in _LOW:
                    setattr(mine, name, torch.float32)
            elif (
                not name.startswith("_")
                and not isinstance(value, (nn.Module, type, torch.Tensor))
                and hasattr(value, "__dict__")
                and vars(theirs).get(name) is not value
            ):
                for attr, inner in list(vars(value).items()):
                    if isinstance(inner, torch.dtype) and inner in _LOW:
                        try:
                            setattr(value, attr, torch.float32)
                        except Exception:
                            continue  # a frozen object: the copy keeps its dtype
    return twin
