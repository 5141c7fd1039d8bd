"""Root calls already seen to run clean: their repeats check every op but tag no origins inside.

Giving each op's output the origin of its dtype is what lets a finding say where a tensor got its
dtype, and on a dispatch-bound forward (a GPU decode step, a small UNet) it is a third of watch's
cost. Which ops mix dtypes depends on the dtypes that go in, not on the values. So a root call
whose signature (the dtypes and devices of its tensor arguments, its flags, the dtypes of the
model's parameters and buffers, autocast, grad mode, train/eval) has run once without a finding
runs the same ops on the same dtypes when it comes again: its repeats still check every op (a
mismatch is still found), but inside the call they tag nothing; model inputs and what the call
hands back are still tagged. A finding in such a repeat (a data-dependent branch) gets the origins
known by then, the rest of the call tags again, and the signature is forgotten, so the next call
tags everything.

Remembered per root module for the process (weakly: a model that goes, goes), a few signatures
each, so that a `with watch()` around each call is as cheap as one around a loop.
"""

from __future__ import annotations

import threading
import weakref
from itertools import repeat
from operator import attrgetter, is_not
from typing import Any

import torch
from torch import nn

_PER_MODULE = 16  # signatures remembered per root module
_DEPTH = 3  # containers looked into for tensors and flags
_ITEMS = 64  # items per container looked at

_clean: weakref.WeakKeyDictionary[nn.Module, list[tuple]] = weakref.WeakKeyDictionary()
_state: weakref.WeakKeyDictionary[nn.Module, tuple[int, list[weakref.ref]]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()
_dtype = attrgetter("dtype")


def _value(v: Any, depth: int) -> Any:
    """What of an argument can change which ops mix dtypes: a tensor's dtype and device, a flag's
    value, a number's type (timesteps change every call), a container's items; else the type."""
    if isinstance(v, torch.Tensor):
        return (v.dtype, v.device.type, v.dim() > 0)
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, (int, float)):
        return type(v)
    if depth < _DEPTH:
        if type(v) in (list, tuple):
            return (len(v), *(_value(x, depth + 1) for x in v[:_ITEMS]))
        if isinstance(v, dict):
            return tuple((k, _value(x, depth + 1)) for k, x in list(v.items())[:_ITEMS])
    return type(v)


def _tensors(module: nn.Module) -> list[torch.Tensor]:
    """The model's parameters and buffers, listed once per model (walking the modules costs more
    than a small forward) and held weakly (a replaced weight is not kept alive); dtype changes are
    seen: `.half()` converts them in place."""
    key = len(module._modules) + len(module._parameters)
    with _lock:
        kept = _state.get(module)
    if kept is not None and kept[0] == key:
        tensors = [ref() for ref in kept[1]]
        if all(map(is_not, tensors, repeat(None))):
            return tensors
    tensors = [*module.parameters(), *module.buffers()]
    with _lock:
        _state[module] = (key, [weakref.ref(t) for t in tensors])
    return tensors


def signature(module: nn.Module, args: tuple, kwargs: dict, autocast: tuple) -> tuple:
    """What decides the dtypes a call of `module` meets (see the module docstring)."""
    tensors = _tensors(module)
    return (
        _value(args, 0),
        _value(kwargs, 0),
        hash(tuple(map(_dtype, tensors))),
        tensors[0].device.type if tensors else None,
        autocast,
        torch.is_grad_enabled(),
        module.training,
    )


def seen_clean(module: nn.Module, sig: tuple) -> bool:
    with _lock:
        return sig in _clean.get(module, ())


def remember(module: nn.Module, sig: tuple, clean: bool) -> None:
    """After a call that completed: clean (no finding) or not (forgotten: tag everything again)."""
    with _lock:
        sigs = _clean.setdefault(module, [])
        if sig in sigs:
            sigs.remove(sig)
        if clean:
            sigs.append(sig)
            del sigs[:-_PER_MODULE]


def forget_all() -> None:
    """Tag every call again (benchmarks measure the first call this way)."""
    with _lock:
        _clean.clear()


class CallState(threading.local):
    """The running root call, per thread (class attributes: the values in a thread with none)."""

    lazy = False  # it repeats a call seen clean: no origins tagged inside it (from now on)
    repeat = False  # it began as such a repeat: what it finds lacks origins made before
    call: tuple | None = None  # (root module, signature, findings count when it began)
    dirty = False  # something was found or went wrong in it


class Repeats:
    """A session's view: is the running root call a repeat of a clean one (`state.lazy`)?"""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled  # fix mode casts as it goes: every call is watched in full
        # every root call starts as a repeat: a run that only asks whether anything is found (a
        # fix's replay) tags no origins until it finds something
        self.assume_clean = False
        self.state = CallState()
        self._partial: set[int] = set()  # id() of the findings made in a repeat (origins missing)

    def begin(
        self,
        module: nn.Module,
        args: tuple,
        kwargs: dict,
        autocast: tuple,
        findings: int,
        via: nn.Module | None = None,
    ) -> None:
        """A root call of `module` begins; `via`: the submodule it was entered through, when the
        call is a method of `module` other than forward (`pipe(...)` calling its transformer, then
        its VAE's decoder: one method, one signature, other ops)."""
        state = self.state
        state.lazy = state.repeat = False
        state.call = None
        state.dirty = False
        if self.enabled and self.assume_clean:  # nothing to sign: it is a repeat, and none follows
            state.lazy = state.repeat = True
            return
        sig = signature(module, args, kwargs, autocast)
        if via is not None and via is not module:
            sig = (*sig, id(via))
        state.call = (module, sig, findings)
        state.lazy = state.repeat = self.enabled and seen_clean(module, sig)

    def end(self, completed: bool, findings: int) -> None:
        """The root call returned (`completed`) or raised; `findings`: the report's count now."""
        state = self.state
        call = state.call
        state.lazy = state.repeat = False
        state.call = None
        if call is not None:
            module, sig, before = call
            remember(module, sig, completed and not state.dirty and findings == before)

    def found(self) -> bool:
        """Something was found or went wrong: the running root call is not clean, and tags again.
        True when it began as a repeat of a clean call (what it finds may lack origins)."""
        state = self.state
        state.dirty = True
        state.lazy = False
        return state.repeat

    def rebuild(self, finding: Any) -> bool:
        """Whether a finding made in a repeat is met again where its origins can be had."""
        return not self.state.repeat and id(finding) in self._partial

    def add(self, report: Any, finding: Any) -> tuple[Any, bool]:
        """`report.add(finding)`, except that a finding made in a repeat of a clean call gives way to
        the same finding made later with its origins. (the finding kept, whether it is `finding`'s)"""
        partial = self.found()
        kept = report.add(finding)
        if kept is finding:
            if partial:
                self._partial.add(id(finding))
            return kept, True
        if partial or id(kept) not in self._partial:
            return kept, False
        self._partial.discard(id(kept))
        count = kept.count
        kept.__dict__.update(finding.__dict__)
        kept.count = count
        return kept, True
