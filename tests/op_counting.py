"""Device-independent cost of a monitor: the aten ops it adds and the bytes they read, per
module output, counted with a TorchDispatchMode (the same on any device and machine load)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn.modules.module import register_module_forward_hook
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


class CountOps(TorchDispatchMode):
    """Counts every aten op and the bytes of the tensors it reads (its tensor arguments), the tool's
    own included (a user's mode is set aside around them: numerics/own_ops.py)."""

    sees_dtype_doctor = True

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0
        self.bytes_read = 0
        self.by_op: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        name = str(func.overloadpacket.__name__)
        self.by_op[name] = self.by_op.get(name, 0) + 1
        for leaf in tree_leaves((args, kwargs or {})):
            if isinstance(leaf, torch.Tensor):
                self.bytes_read += _nbytes(leaf)
        return func(*args, **(kwargs or {}))


@dataclass
class Counts:
    steps: int
    ops: int
    bytes_read: int
    outputs: int  # floating tensors returned by module calls (every call's, repeats included)
    output_bytes: int
    by_op: dict[str, int]


def _floating(obj: Any) -> list[torch.Tensor]:
    return [t for t in tree_leaves(obj) if isinstance(t, torch.Tensor) and t.is_floating_point()]


def count_steps(step: Callable[[], Any], steps: int) -> Counts:
    """Ops, bytes read and module outputs over `steps` calls of `step` (warm it up first)."""
    seen = {"n": 0, "bytes": 0}

    def on_output(module: torch.nn.Module, args: tuple, output: Any) -> None:
        for t in _floating(output):
            seen["n"] += 1
            seen["bytes"] += _nbytes(t)

    handle = register_module_forward_hook(on_output)
    try:
        with CountOps() as mode:
            for _ in range(steps):
                step()
    finally:
        handle.remove()
    return Counts(steps, mode.ops, mode.bytes_read, seen["n"], seen["bytes"], mode.by_op)


@dataclass
class Extra:
    """What monitoring adds to plain, per module output."""

    ops_per_output: float
    bytes_per_output_byte: float
    plain: Counts
    monitored: Counts


def extra_cost(
    step: Callable[[], Any],
    start: Callable[[], Any],
    stop: Callable[[], Any],
    warmup: int = 3,
    steps: int = 8,
) -> Extra:
    """Steady state: `steps` plain calls, then `steps` monitored ones after `warmup` monitored calls."""
    for _ in range(warmup):
        step()
    plain = count_steps(step, steps)
    start()
    try:
        for _ in range(warmup):
            step()
        monitored = count_steps(step, steps)
    finally:
        stop()
    ops = (monitored.ops - plain.ops) / plain.outputs
    read = (monitored.bytes_read - plain.bytes_read) / plain.output_bytes
    return Extra(ops, read, plain, monitored)
