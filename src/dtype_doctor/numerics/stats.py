"""Range statistics of a tensor, computed on its device with no host sync.

One row per tensor: [abs-max, smallest non-zero magnitude, count below the smallest normal
(non-zero), count of zeros, signed max]. Rows are stacked and read once per step (`Rows.read`).
A range row (`Rows.add_range`: one fused `aminmax` pass) knows abs-max and max only; its other
columns are NaN (`is_light`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from ..tensors import LEAVES, iter_tensors

ABSMAX, MIN_NONZERO, N_TINY, N_ZERO, MAX = range(5)

FP16_MAX = 65504.0
FP16_TINY = 6.103515625e-05  # smallest normal float16
BF16_MAX = 3.3895313892515355e38


# Tensors in fp32/fp64 are measured against float16's smallest normal, so a float32 run also says
# how much of it would underflow in float16; low-precision tensors against their own.
_TINY_FOR = {
    torch.float16: FP16_TINY,
    torch.bfloat16: float(torch.finfo(torch.bfloat16).smallest_normal),
    torch.float32: FP16_TINY,
    torch.float64: FP16_TINY,
}


_AMINMAX_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)  # others: in float32


def tiny_threshold(dtype: torch.dtype) -> float:
    return _TINY_FOR.get(dtype, float(torch.finfo(dtype).smallest_normal))


def measurable(x: object) -> bool:
    return isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel() > 0 and not x.is_meta


@torch.no_grad()
def tensor_stats(x: torch.Tensor, signed: bool = False) -> torch.Tensor:
    """A float32 row [absmax, min_nonzero, n_tiny, n_zero, max] on x's device; no sync.

    NaN anywhere makes absmax NaN, an inf makes it inf, so finiteness needs no extra pass.
    The signed max costs one more pass and is only computed when asked (`signed`), to tell an
    additive attention mask (-inf only) from an overflow; otherwise it repeats absmax.
    """
    a = x.detach().abs()
    absmax = a.amax()
    top = x.detach().amax() if signed else absmax
    n_zero = a.numel() - torch.count_nonzero(a)  # NaN counts as non-zero
    n_tiny = torch.count_nonzero(a < tiny_threshold(x.dtype)) - n_zero
    min_nonzero = torch.where(a > 0, a, math.inf).amin()
    return torch.stack((absmax.float(), min_nonzero.float(), n_tiny.float(), n_zero.float(), top.float()))


@torch.no_grad()
def light_stats(x: torch.Tensor) -> torch.Tensor:
    """Only the abs-max (one fused pass, no temporary), for big tensors where range is all we need.

    The other columns are NaN (unknown), which `is_light` tells; finiteness still shows in abs-max.
    """
    absmax = torch.linalg.vector_norm(x.detach(), ord=math.inf).float()
    unknown = torch.full((), math.nan, device=x.device)
    return torch.stack((absmax, unknown, unknown, unknown, absmax))


def is_light(row: list[float]) -> bool:
    return math.isnan(row[N_ZERO])


def measured_tensors(obj: Any) -> Sequence[torch.Tensor]:
    """Floating tensors in a module's inputs or outputs, three containers deep at most."""
    if isinstance(obj, torch.Tensor):  # the common cases, on every module call: no generator chain
        return (obj,) if obj.is_floating_point() and obj.numel() and not obj.is_meta else ()
    if type(obj) in LEAVES:
        return ()
    return [t for t in iter_tensors(obj, max_depth=3) if measurable(t)]


def fmt(value: float) -> str:
    """Short human form of a magnitude: 6.6e+04, inf, nan, 0."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf"
    if value == 0:
        return "0"
    return f"{value:.3g}" if 1e-3 <= abs(value) < 1e4 else f"{value:.2e}"


_F32_MAX = float(torch.finfo(torch.float32).max)
_CPU_AT_ONCE = 1 << 16  # elements: a CPU tensor this big is measured at once, not copied


class Rows:
    """The stats rows of one step, by slot; read back once (`read`).

    A range row (`add_range`) costs one op per tensor, reading it once: `aminmax` runs when the
    tensor is added (no copy), and its two scalars wait on the device for `read`, which stacks
    them in one op. The full rows (`add`, underflow and zero counts too) cost more and are for
    sampled steps: a tensor is snapshotted (one copy: the user's code may change it in place before
    its batch runs) and measured with the others of its batch in a fixed number of ops, instead
    of about ten ops per tensor: on a dispatch-bound model (a GPU forward is mostly kernel
    launches) the per-tensor ops cost more than the model. On an accelerator a batch is the
    tensors of one dtype (`_foreach` kernels); on the CPU those of one shape, stacked into a
    matrix (`_matrix_stats`). A batch runs when the step holds `batch` tensors or `budget` bytes,
    and at `read`. Nothing goes host→device or back before `read` (counts and flags stay on the
    host until then).
    """

    def __init__(self, batch: int = 512, budget: int = 1 << 26) -> None:
        self._batch = batch
        self._budget = budget
        # (rows on device, their slots, numels (None: rows finished already), signed flags)
        self._chunks: list[tuple[torch.Tensor, Sequence[int], Sequence[int] | None, Sequence[bool]]] = []
        # (dtype, shape) on the CPU, (device, dtype) elsewhere → [(copy, slot, numel, signed)]
        self._pending: dict[tuple, list[tuple[torch.Tensor, int, int, bool]]] = {}
        self._count = 0
        self._bytes = 0
        # range rows: (slot, min, max), the two 0-d tensors on the measured tensor's device
        self._ranges: list[tuple[int, torch.Tensor, torch.Tensor]] = []
        self._aliases: list[tuple[int, int]] = []  # (slot, the earlier slot it repeats)
        self.n = 0

    def __len__(self) -> int:
        return self.n

    def add(self, x: torch.Tensor, signed: bool = False) -> int:
        """A row of `tensor_stats(x, signed)`, computed with its batch (a big CPU tensor at once:
        its own ops cost little more than its share of a batch's, and no copy is made)."""
        numel = x.numel()
        slot = self.n
        self.n = slot + 1
        if x.is_cpu:
            if numel >= _CPU_AT_ONCE:
                self._chunks.append((_matrix_stats([x.detach()], signed), (slot,), (numel,), (signed,)))
                return slot
            key: tuple = (x.dtype, x.shape)
        else:
            key = (x.device, x.dtype)
        group = self._pending.get(key)
        if group is None:
            group = self._pending[key] = []
        group.append(((x.detach() if x.requires_grad else x).clone(), slot, numel, signed))
        self._count += 1
        self._bytes += numel * x.itemsize
        if self._count >= self._batch or self._bytes >= self._budget:
            self._run()
        return slot

    def add_range(self, x: torch.Tensor) -> int:
        """A row [absmax, NaN, NaN, NaN, max] from x's min and max (one fused pass: NaN anywhere
        makes both NaN, an inf shows as ±inf), computed now, so x needs no copy."""
        grad = torch.is_grad_enabled()  # no autograd record (it would add ops and keep x alive);
        if grad:  # cheaper than `torch.no_grad()` around every call
            torch._C._set_grad_enabled(False)
        try:
            low, high = torch.aminmax(x if x.dtype in _AMINMAX_DTYPES else x.float())
        finally:
            if grad:
                torch._C._set_grad_enabled(True)
        self._ranges.append((self.n, low, high))
        self.n += 1
        return self.n - 1

    def alias(self, slot: int) -> int:
        """A row that repeats `slot`'s (a tensor with the same values: no op)."""
        self._aliases.append((self.n, slot))
        self.n += 1
        return self.n - 1

    def add_row(self, row: torch.Tensor) -> int:
        """A row computed elsewhere (a light row, the accuracy check's)."""
        self._chunks.append((row.reshape(1, -1), (self.n,), None, (False,)))
        self.n += 1
        return self.n - 1

    def read(self) -> list[list[float]]:
        """Every row as Python floats, in slot order: one device→host transfer per device."""
        self._run()
        if not self._chunks and not self._ranges:
            return []
        out: list[Any] = [None] * self.n
        self._read_ranges(out)
        for device in {c[0].device for c in self._chunks}:
            chunks = [c for c in self._chunks if c[0].device == device]
            values = iter(torch.cat([c[0] for c in chunks]).tolist())
            for _, slots, numels, signed in chunks:
                for j, slot in enumerate(slots):
                    r = next(values)
                    if numels is not None:  # a batched row: finish it on the host
                        r[N_TINY] = r[N_ZERO] - r[N_TINY]  # non-zero less normal
                        r[N_ZERO] = numels[j] - r[N_ZERO]
                        if not signed[j]:
                            r[MAX] = r[ABSMAX]
                        low = r[MIN_NONZERO]
                        if low != low or low >= _F32_MAX:  # NaN operands; only zeros (or inf)
                            r[MIN_NONZERO] = math.inf
                    out[slot] = r
        for slot, same in self._aliases:  # in slot order: an alias of an alias is filled already
            out[slot] = list(out[same])
        return out

    def _read_ranges(self, out: list[Any]) -> None:
        """The range rows into `out`: one stack and one device→host transfer per device."""
        for device in {low.device for _, low, _ in self._ranges}:
            entries = [e for e in self._ranges if e[1].device == device]
            values = torch.stack([e[1] for e in entries] + [e[2] for e in entries]).tolist()
            k = len(entries)
            for j, (slot, _, _) in enumerate(entries):
                low, high = values[j], values[k + j]
                absmax = math.nan if low != low else max(-low, high)
                out[slot] = [absmax, math.nan, math.nan, math.nan, high]

    def _run(self) -> None:
        for items in self._pending.values():
            xs, slots, numels, signed = zip(*items, strict=True)
            self._chunks.append((_batch_stats(list(xs), any(signed)), slots, numels, signed))
        self._pending.clear()
        self._count = self._bytes = 0


def _below_tiny(dtype: torch.dtype) -> float:
    """The largest value of `dtype` below its tiny threshold (|x| >= threshold ⇔ |x| > this)."""
    try:
        return _BELOW_TINY[dtype]
    except KeyError:
        t = torch.tensor(tiny_threshold(dtype), dtype=dtype)  # on the host: no device sync
        value = _BELOW_TINY[dtype] = float(torch.nextafter(t, torch.zeros((), dtype=dtype)))
        return value


_BELOW_TINY: dict[torch.dtype, float] = {}
for _dt in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
    _below_tiny(_dt)


def _batch_stats(xs: list[torch.Tensor], signed: bool) -> torch.Tensor:
    """(k, 5) rows [absmax, min_nonzero (float32's max or more: none), n_normal (NaN counted),
    n_nonzero, max (absmax unless `signed`)] for tensors of one dtype and device (of one shape
    on the CPU), in a fixed number of ops; `Rows.read` finishes them."""
    if xs[0].device.type == "cpu":
        return _matrix_stats(xs, signed)
    return _foreach_stats(xs, signed)


def _matrix_stats(xs: list[torch.Tensor], signed: bool) -> torch.Tensor:
    """On the CPU (where `_foreach` ops loop over the tensors): the tensors of one shape stacked
    into a (k, n) matrix, reduced along its rows. Only arithmetic and reductions, which the CPU
    runs vectorised (a comparison, writing booleans, costs about ten times more per element);
    float16/bfloat16 are measured in float32, exactly."""
    m = (
        torch.stack(xs).reshape(len(xs), -1) if len(xs) > 1 else xs[0].reshape(1, -1)
    )  # channels_last: no view
    below = _below_tiny(m.dtype)
    if m.dtype not in (torch.float32, torch.float64):
        m = m.float()
    big = torch.finfo(m.dtype).max
    a = m.abs()
    absmax = a.amax(1)
    one = _indicator_(a.clamp_max(1))  # 0 where zero, 1 elsewhere (NaN too)
    nonzero = one.sum(1)
    normal = _indicator_(a.sub(below).clamp_(0, 1)).sum(1)  # |x| > below: >= the smallest normal; NaN
    # the smallest non-zero magnitude: zeros raised to the largest value (`read` tells it means
    # none: only zeros, or inf), NaN ignored
    lifted = a.add(one.sub_(1), alpha=-big).nan_to_num_(nan=math.inf, posinf=math.inf)
    top = m.amax(1) if signed else absmax
    return torch.stack((absmax, lifted.amin(1), normal, nonzero, top), 1).float()


def _indicator_(t: torch.Tensor) -> torch.Tensor:
    """In place, for t in [0, 1] or NaN: 0 where zero, 1 elsewhere (NaN too); `sign` says 0 for NaN."""
    return t.ceil_().nan_to_num_(nan=1.0)


def _foreach_stats(xs: list[torch.Tensor], signed: bool) -> torch.Tensor:
    """On an accelerator: `_foreach` kernels (one launch per op for the whole batch), nothing
    copied between host and device."""
    f32 = torch.float32
    dtype = xs[0].dtype
    below = _below_tiny(dtype)
    big = torch.finfo(dtype).max
    a = torch._foreach_abs(xs)
    absmax = torch.stack(torch._foreach_norm(xs, math.inf, dtype=f32))
    nonzero = torch.stack(torch._foreach_norm(xs, 0, dtype=f32))
    z = torch._foreach_sign(a)  # 0 where zero, 1 elsewhere
    torch._foreach_sub_(z, 1)
    torch._foreach_mul_(z, -big)  # the largest value where zero
    torch._foreach_add_(z, a)
    min_nonzero = torch.stack(torch._foreach_norm(z, -math.inf, dtype=f32))
    min_nonzero = torch.where(nonzero > 0, min_nonzero, math.inf)
    torch._foreach_clamp_min_(a, below)
    torch._foreach_sub_(a, below)  # non-zero where |x| >= the smallest normal (and NaN)
    normal = torch.stack(torch._foreach_norm(a, 0, dtype=f32))
    top = torch.stack(torch._foreach_max(xs)).to(f32) if signed else absmax
    return torch.stack((absmax, min_nonzero, normal, nonzero, top), 1)
