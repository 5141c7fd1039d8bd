"""A dry run's modes, put together: the hybrid's dispatch mode (hybrid.py), what it must see
before dispatch (`Fronts`), and the watch session's ops run through function_memo.CallMemo."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import AbstractContextManager as ContextManager
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from .function_memo import CallMemo
from .hybrid import META, HybridMode, Log, is_real

__all__ = ["Fronts", "hybrid"]


class Fronts:
    """What the hybrid sees before dispatch: `torch.tensor(data, device=meta)` never reaches it, so
    integer data is made on CPU instead; attention runs all on meta, its mask included: its
    decomposition on meta builds a real seq x seq causal mask (ones, tril, where) per layer that no
    model code reads (0.34 s → 0.71 s for the Llama-7B dry run at seq 2048).

    Each is a front (watching.mode.Front): it gets `watched`, the watch's own handling of a call, and
    runs what it makes through it, so the watch sees each call as before."""

    def __init__(self, mode: HybridMode) -> None:
        self.mode = mode
        self.table = {
            torch.nn.functional.scaled_dot_product_attention: self.attention,
            torch.tensor: self.factory,
            torch.as_tensor: self.factory,
        }

    def attention(self, watched: Any, func: Any, args: tuple, kwargs: dict) -> Any:
        self.mode.aside += 1  # first: the hybrid would keep a real mask real when moved to meta
        try:  # its arguments are tensors, None and scalars, never nested
            to_meta = lambda x: watched(torch.Tensor.to, (x, META), {}) if is_real(x) else x  # noqa: E731
            args = tuple(map(to_meta, args))
            kwargs = {key: to_meta(value) for key, value in kwargs.items()}
            return watched(func, args, kwargs)
        finally:
            self.mode.aside -= 1

    def factory(self, watched: Any, func: Any, args: tuple, kwargs: dict) -> Any:
        # made on CPU: integer data carries values the model reads, and the hybrid keeps a small
        # floating tensor made from nothing real too (a copy to meta would stay real)
        if str(kwargs.get("device")) != "meta":
            return watched(func, args, kwargs)
        return watched(func, args, {**kwargs, "device": "cpu"})


class _FrontMode(TorchFunctionMode):
    """The fronts as a mode of their own, for a hybrid run outside a watch session."""

    def __init__(self, fronts: Fronts) -> None:
        super().__init__()
        self.table = fronts.table

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        try:
            front = self.table.get(func)
        except TypeError:
            front = None
        if front is None:
            return func(*args, **kwargs)
        return front(lambda f, a, k: f(*a, **k), func, args, kwargs)


def hybrid(memo: dict[tuple, Any] | None = None, session: Any = None) -> ContextManager[Log]:
    """A context that runs the enclosed forward as the hybrid; yields the log of assumptions.
    memo: the meta kernels' answers of an earlier dry run to reuse (a check's fix replays reuse its
    own). session: the watch session of the dry run, not entered yet: it takes the fronts into its
    own mode now (Session.hand_first) instead of a TorchFunctionMode of theirs in front of it, and
    runs the ops it sees through function_memo.CallMemo."""
    log = Log()
    mode = HybridMode(log, memo)
    fronts = Fronts(mode)
    if session is not None:
        session.hand_first(fronts.table, CallMemo(mode).run)
        return _entered(log, mode, contextlib.nullcontext())
    return _entered(log, mode, _FrontMode(fronts))


@contextlib.contextmanager
def _entered(log: Log, mode: HybridMode, front_mode: Any) -> Iterator[Log]:
    with front_mode, mode:
        yield log
