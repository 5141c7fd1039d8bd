"""OpTrace: the first op of a step whose float16/bfloat16 result went inf/NaN from finite operands.

On one step (the first that computes in a low dtype) every op with a low-precision result gets
a finiteness flag computed on its device (one reduction) and the flags of its operands (the
flag of the op that made them, or one more reduction); the flags are read back once, when the
step ends. So a non-finite producer inside a module's forward is named at its line on the step
that produced it: no second call of the module is needed.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch

from .opchecks import LOW

MAX_OPS = 20000  # a step longer than this is traced up to here


@dataclass
class Traced:
    op: str
    file: str | None
    line: int | None
    module: str | None
    dtype: torch.dtype
    out: int  # index of the result's flag
    ins: list[int]  # indices of the floating operands' flags


class OpTrace:
    def __init__(self) -> None:
        self._flags: list[torch.Tensor] = []
        self._made: dict[int, tuple[weakref.ref, int]] = {}  # id(tensor) → its flag
        self.ops: list[Traced] = []

    def _flag(self, t: torch.Tensor) -> int:
        entry = self._made.get(id(t))
        if entry is not None and entry[0]() is t:
            return entry[1]
        self._flags.append(torch.isfinite(t.detach()).all())
        idx = len(self._flags) - 1
        self._made[id(t)] = (weakref.ref(t), idx)
        return idx

    @torch.no_grad()
    def prior(self, destination: object) -> int | None:
        """The flag of what an in-place op's destination holds before the op writes it: an operand
        too (a fill of -inf scattered into is not made non-finite by the scatter)."""
        if (
            not isinstance(destination, torch.Tensor)
            or destination.dtype not in LOW
            or len(self.ops) >= MAX_OPS
        ):
            return None
        self._flags.append(torch.isfinite(destination.detach()).all())
        return len(self._flags) - 1

    @torch.no_grad()
    def record(
        self,
        op: str,
        out: torch.Tensor,
        operands: list[torch.Tensor],
        site: tuple[str | None, int | None],
        module: str | None,
        prior: int | None = None,
    ) -> None:
        if len(self.ops) >= MAX_OPS or out.dtype not in LOW or not out.numel():
            return
        ins = [self._flag(t) for t in operands if t.is_floating_point() and t.numel() and t is not out]
        if prior is not None:
            ins.append(prior)
        self._flags.append(torch.isfinite(out.detach()).all())
        idx = len(self._flags) - 1
        self._made[id(out)] = (weakref.ref(out), idx)
        self.ops.append(Traced(op, site[0], site[1], module, out.dtype, idx, ins))

    def first_producer(self) -> Traced | None:
        """The first traced op with a non-finite result and finite operands (one read-back)."""
        if not self.ops:
            return None
        with torch._C.DisableTorchFunction():
            devices = {f.device for f in self._flags}
            flags = self._flags if len(devices) == 1 else [f.cpu() for f in self._flags]
            finite = torch.stack(flags).tolist()
        for t in self.ops:
            if not finite[t.out] and all(finite[i] for i in t.ins):
                return t
        return None
