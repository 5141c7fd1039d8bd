"""The tensors measured in one step, by identity and version: which stats row holds a tensor's
current values, so a tensor passed from module to module (or viewed whole in another shape) is
measured once."""

from __future__ import annotations

import weakref

import torch


def _whole_base(tensor: torch.Tensor) -> torch.Tensor | None:
    """The tensor whose storage `tensor` views all of in the same dtype (a reshape, permute or
    transpose: the same values in another shape); None."""
    base = tensor._base
    if base is None or base.dtype != tensor.dtype or base.numel() != tensor.numel():
        return None
    return base


class Seen:
    def __init__(self) -> None:
        # id(tensor) → (the tensor, weakly; its slot; its version then, -1 for an inference tensor)
        self._slot_of: dict[int, tuple[weakref.ref, int, int]] = {}

    def note(self, tensor: torch.Tensor, slot: int) -> None:
        """`tensor`'s values are in `slot` now; so are its whole base's (views share their base's
        version counter: an in-place change through either shows)."""
        version = -1 if tensor.is_inference() else tensor._version  # inference tensors keep none
        self._slot_of[id(tensor)] = (weakref.ref(tensor), slot, version)
        base = _whole_base(tensor)
        if base is not None and self.slot(base) < 0:
            self._slot_of[id(base)] = (weakref.ref(base), slot, version)

    def slot(self, tensor: torch.Tensor) -> int:
        """The slot `tensor` was measured into this step, if it has not been changed in place since
        (`out += residual` between modules, `ReLU(inplace=True)`: then it is measured again); -1."""
        entry = self._slot_of.get(id(tensor))
        if entry is None or entry[0]() is not tensor:
            return -1
        return entry[1] if entry[2] < 0 or entry[2] == tensor._version else -1

    def same_values(self, tensor: torch.Tensor) -> int:
        """The slot holding `tensor`'s values where it views all of a tensor measured this step,
        unchanged since; -1."""
        base = _whole_base(tensor)
        return -1 if base is None else self.slot(base)
