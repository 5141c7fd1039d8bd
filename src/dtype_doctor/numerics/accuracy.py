"""Finite but wrong: a module whose low-precision output is finite yet far from float32.

On the first monitored step that runs low-precision compute, every such module call is also run
on a float32 copy of the model (its inputs cast up, autocast off, the same random numbers), and
the relative L2 error of its output is kept on the device as one more stats row (read back with
the step's rows: no extra host sync). The deepest modules above `threshold` are flagged; at a
flagged module's next call an op-level scan (`opscan`) names the op inside it, and its float32
output cast back to the low dtype (what keep_in_fp32 does) measures the fix.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..tensors import isolate_state, iter_tensors
from .apart import call_apart, float32_inputs, follow_float32, rng_state, set_rng_state
from .opscan import OpHit, copy_without_hooks, in_range_parts, rel_l2, scan_ops
from .stats import measurable, measured_tensors

THRESHOLD = 0.1  # relative L2 error of a module output vs its float32 re-run
MAX_PARAMS = 50_000_000  # above this no float32 copy of the model is made
_LOW = (torch.float16, torch.bfloat16)


@dataclass
class Wrong:
    """A module flagged finite-but-wrong; `hit` and `after` are filled at its next call."""

    path: str
    module_type: str
    rel_error: float
    dtype: str
    step: int
    hit: OpHit | None = None
    after: float | None = None  # error vs float32 with the module kept in float32
    scanned: bool = False


def _rel_row(outs: list[torch.Tensor], refs: list[torch.Tensor]) -> torch.Tensor:
    """[rel L2 error, float32 abs-max, finite flag] on the device."""
    parts = [in_range_parts(o, r) for o, r in zip(outs, refs, strict=True)]
    num = sum(torch.linalg.vector_norm(d) ** 2 for d, _ in parts)
    den = sum(torch.linalg.vector_norm(r) ** 2 for _, r in parts)
    finite = torch.stack([torch.isfinite(o.detach()).all() for o in outs]).all()
    absmax = torch.stack([r.abs().amax() for r in refs]).amax()
    return torch.stack((torch.sqrt(num / den), absmax, finite.float()))


def _first_parameter(module: nn.Module) -> torch.Tensor | None:
    """`next(module.parameters(), None)` without the generators (it runs on every module call)."""
    for p in module._parameters.values():
        if p is not None:
            return p
    for child in module._modules.values():
        if child is not None:
            p = _first_parameter(child)
            if p is not None:
                return p
    return None


def _low(module: nn.Module, args: tuple, kwargs: dict) -> bool:
    device = None
    for a in (*args, *kwargs.values()) if kwargs else args:  # the common case: bare tensors
        if type(a) is torch.Tensor or type(a) is nn.Parameter:
            if a.dtype in _LOW and measurable(a):
                return True
            device = device or a.device.type
        elif any(t.dtype in _LOW for t in measured_tensors(a)):
            return True
    first = _first_parameter(module)  # one parameter tells a cast model (cheap on every call)
    if first is not None and first.dtype in _LOW:
        return True
    if device is None:
        device = next((t.device.type for t in iter_tensors((args, kwargs))), "cpu")
    return torch.is_autocast_enabled(device)


def low_call(module: nn.Module, args: tuple, kwargs: dict, low_inputs: bool) -> bool:
    """`_low` for a caller that has already looked at the call's floating inputs (`low_inputs`:
    one of them is float16/bfloat16): the parameter and autocast tests only."""
    if low_inputs:
        return True
    first = _first_parameter(module)
    if first is not None and first.dtype in _LOW:
        return True
    return torch._C._is_any_autocast_enabled() and _low(module, args, kwargs)


class AccuracyCheck:
    """Owned by a NumericsMonitor: `before`/`after` around each call, `flagged` at the flush."""

    def __init__(self, threshold: float = THRESHOLD) -> None:
        self.threshold = threshold
        self.done = False  # the check ran on one step already
        self.skipped: str | None = None  # why no float32 copy was made
        self.wrong: dict[str, Wrong] = {}
        self._twins: dict[int, nn.Module] = {}  # id(root) → its float32 copy
        self._pending: list[tuple[str, str, int]] = []  # (path, module type, row slot)

    @property
    def pending(self) -> bool:
        """Checked calls of this step wait for `flush`."""
        return bool(self._pending)

    def twin_of(self, root: nn.Module, rel: str, memo: dict | None = None) -> nn.Module | None:
        twin = self._twins.get(id(root))
        if twin is None:
            if self.done:
                return None
            if sum(p.numel() for p in root.parameters()) > MAX_PARAMS:
                self.skipped = f"the model has more than {MAX_PARAMS:,} parameters"
                self.done = True
                return None
            try:
                twin = follow_float32(copy_without_hooks(root, memo).float(), root)
            except Exception as exc:
                self.skipped = f"no float32 copy of the model: {type(exc).__name__}: {exc}"
                self.done = True
                return None
            self._twins[id(root)] = twin
        try:
            return twin.get_submodule(rel) if rel else twin
        except AttributeError:
            return None

    def before(
        self,
        root: nn.Module,
        rel: str,
        module: nn.Module,
        args: tuple,
        kwargs: dict,
        memo: dict | None = None,
        low: bool | None = None,
    ) -> list | None:
        """The float32 outputs of the call, or None when it is not checked (not low precision:
        `low`, or `_low` when not given)."""
        if not (_low(module, args, kwargs) if low is None else low):
            return None
        twin = self.twin_of(root, rel, memo)
        if twin is None or "forward" in twin.__dict__:
            return None
        try:
            a, k = float32_inputs(isolate_state(args), isolate_state(kwargs))
        except Exception:
            return None
        device = next((t.device.type for t in iter_tensors((args, kwargs))), "cpu")
        state = rng_state()
        twin.train(module.training)
        try:
            with torch.no_grad(), torch.autocast(device, enabled=False):
                out = call_apart(twin, *a, **k)
            return list(measured_tensors(out))
        except Exception:
            return None
        finally:
            set_rng_state(state)

    def after(self, path: str, module_type: str, refs: list, output: Any, add_row: Callable) -> None:
        outs = list(measured_tensors(output))
        if (
            not outs
            or len(outs) != len(refs)
            or any(o.shape != r.shape for o, r in zip(outs, refs, strict=True))
        ):
            return
        if not any(o.dtype in _LOW for o in outs):
            return
        row = torch.nn.functional.pad(_rel_row(outs, refs), (0, 2), value=math.nan)
        self._pending.append((path, module_type, add_row(row)))

    def flush(self, values: list[list[float]], dtypes: dict[str, str], step: int) -> list[Wrong]:
        """Flag the deepest finite outputs above the threshold; the check is then done."""
        if not self._pending:
            return []
        self.done = True
        over = {
            path: (kind, values[slot][0])
            for path, kind, slot in self._pending
            if values[slot][2] == 1.0 and math.isfinite(values[slot][0]) and values[slot][0] > self.threshold
        }
        self._pending.clear()
        found = []
        for path, (kind, err) in over.items():
            if any(other != path and (path == "" or other.startswith(path + ".")) for other in over):
                continue  # a module inside it is wrong already: that one is named
            found.append(Wrong(path, kind, err, dtypes.get(path, "float16"), step))
            self.wrong[path] = found[-1]
        if not found:
            self._twins.clear()
        return found

    def close(self) -> list[Wrong]:
        """Drop the float32 copies; the flagged modules never called again (their op not named)."""
        self._twins.clear()
        self._pending.clear()
        self.done = True
        return [w for w in self.wrong.values() if not w.scanned]

    def wants_scan(self, path: str) -> bool:
        entry = self.wrong.get(path)
        return entry is not None and not entry.scanned

    def scan(
        self, path: str, root: nn.Module, rel: str, module: nn.Module, args: tuple, kwargs: dict, memo: dict
    ) -> Wrong:
        """Name the op and measure keep-in-float32 on this call's inputs."""
        entry = self.wrong[path]
        entry.scanned = True
        entry.hit = scan_ops(module, args, kwargs, self.threshold)
        refs = self.before(root, rel, module, args, kwargs, memo)
        if refs:
            low = next((t.dtype for t in measured_tensors((args, kwargs)) if t.dtype in _LOW), torch.float16)
            entry.after = rel_l2([r.to(low) for r in refs], refs)
        if all(w.scanned for w in self.wrong.values()):
            self._twins.clear()
        return entry
