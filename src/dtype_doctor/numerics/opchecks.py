"""What one op's values say about float16/bfloat16 precision: pure checks, no hooks.

Three kinds of silent damage an op can do in a low dtype, told from its arguments alone (free)
or from its output next to a float32 re-run of the same op (a few ops, outside modules only):

- a Python constant that rounds to 0, to inf, or onto a round value (1 - 1e-6 is 1.0 in float16)
  in the dtype it is stored or added in (`clamp(min=1e-8)`, `scores[i] = 2**30`, an Adam eps);
- integer-valued positions beyond the dtype's exact-integer range (`arange(4096, dtype=fp16)`),
  or a cast that moves values by half a unit or more (a 998.39 timestep becomes 1000 in bfloat16);
- a result that is inf where float32 is finite, or an update the low dtype absorbs (x + d == x
  for a non-zero d: an EMA, a running sum, gradient accumulation).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

LOW = (torch.float16, torch.bfloat16)
_MANTISSA = {torch.float16: 10, torch.bfloat16: 7}
ABSORBED_SHARE = 0.5  # of the elements float32 changes, the share the low dtype must leave unchanged
CAST_UNIT = 0.5  # a cast that moves a value above the exact-integer range by this much changes its unit
# what a value read for its units looks like: a timestep or position per sample, not an activation
# (rounding an activation by half its spacing is the format's normal 0.4 % (bfloat16), never a finding)
UNIT_VALUES = 64


@dataclass
class Problem:
    """One thing wrong with an op's values: kind, the figures that show it, in plain words."""

    kind: str  # constant-underflow | constant-overflow | constant-rounds | positions | cast-rounding
    #            | overflow | absorbed
    dtype: torch.dtype
    text: str
    value: float | None = None  # the constant, the largest position, the float32 abs-max
    rounded: float | None = None  # what the low dtype makes of it
    share: float | None = None  # absorbed: the share of the update lost


def exact_integer_limit(dtype: torch.dtype) -> int:
    """The largest N such that every integer up to N is exact in `dtype` (2048 float16, 256 bfloat16)."""
    return 2 ** (_MANTISSA[dtype] + 1)


def ulp(x: float, dtype: torch.dtype) -> float:
    """The spacing of `dtype`'s values at magnitude |x| (normal range)."""
    x = abs(x)
    if x == 0:
        return 0.0
    return 2.0 ** (math.floor(math.log2(x)) - _MANTISSA[dtype])


@functools.lru_cache(maxsize=1024)
def rounded(value: float, dtype: torch.dtype) -> float:
    """`value` stored in `dtype` (inf beyond its range, 0 below half its smallest subnormal)."""
    return torch.tensor(value, dtype=torch.float64).to(dtype).item()


def _name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def constant(value: float, dtype: torch.dtype, bound: bool) -> Problem | None:
    """A Python constant used in a `dtype` op: lost when it rounds to 0 (an eps), to inf (a fill
    value or a forced logit), or, for a bound or a fill (`bound`), onto a round value it was
    written to differ from (1 - 1e-6 → 1.0: the clamp no longer keeps anything below 1)."""
    if not math.isfinite(value) or value == 0:
        return None
    low = rounded(value, dtype)
    name = _name(dtype)
    if math.isinf(low):
        return Problem(
            "constant-overflow",
            dtype,
            f"the constant {value:g} is {low} in {name} (its largest value is {torch.finfo(dtype).max:g})",
            value,
            low,
        )
    if low == 0:
        return Problem(
            "constant-underflow",
            dtype,
            f"the constant {value:g} is 0 in {name} (its smallest positive value is "
            f"{torch.finfo(dtype).smallest_normal * 2.0 ** -_MANTISSA[dtype]:.3g})",
            value,
            low,
        )
    if bound and low != value and low == round(low) and abs(low) <= 1 and abs(value - low) < 1e-3:
        return Problem(
            "constant-rounds",
            dtype,
            f"the constant {value!r} is exactly {low:g} in {name}: the difference it was written "
            f"with ({value - low:+.3g}) is below {name}'s spacing there ({ulp(low or 1.0, dtype):.3g})",
            value,
            low,
        )
    return None


def positions(start: float, end: float, step: float, dtype: torch.dtype) -> Problem | None:
    """An arange/range in `dtype` whose values lie farther apart than its spacing allows."""
    if step == 0:
        return None
    n = math.ceil((end - start) / step)
    if n <= 1:
        return None
    last = start + (n - 1) * step
    biggest = max(abs(start), abs(last))
    if ulp(biggest, dtype) <= abs(step):
        return None
    name = _name(dtype)
    limit = exact_integer_limit(dtype)
    return Problem(
        "positions",
        dtype,
        f"{n} positions up to {biggest:g} made in {name}, whose spacing at {biggest:g} is "
        f"{ulp(biggest, dtype):g} (integers are exact only up to {limit}): neighbouring positions "
        f"become equal (step {step:g})",
        biggest,
        rounded(biggest, dtype),
    )


@torch.no_grad()
def cast_rounding(src: torch.Tensor, out: torch.Tensor) -> Problem | None:
    """A cast down of a value read for its units (a 0-d or 1-d tensor of at most UNIT_VALUES
    elements: timesteps, positions, coordinates per sample) that moves it by CAST_UNIT or more:
    above the exact-integer range its units are lost. Within the format's spacing this is normal
    rounding, so an activation (any other shape) is never judged by it."""
    if not src.numel() or src.dtype.itemsize <= out.dtype.itemsize:
        return None
    if src.dim() > 1 or src.numel() > UNIT_VALUES:
        return None
    wide = src.detach().double()
    moved = (out.detach().double() - wide).abs()
    finite = torch.isfinite(moved)
    if not bool(finite.any()):
        return None
    moved = torch.where(finite, moved, torch.zeros_like(moved))
    worst = int(moved.flatten().argmax())
    shift = float(moved.flatten()[worst])
    if shift < CAST_UNIT:
        return None
    before, after = float(wide.flatten()[worst]), float(out.flatten()[worst])
    name = _name(out.dtype)
    return Problem(
        "cast-rounding",
        out.dtype,
        f"the cast to {name} turns {before:.6g} into {after:.6g} (off by {shift:.3g}, {name}'s "
        f"spacing there is {ulp(after or before, out.dtype):g}): above {exact_integer_limit(out.dtype)} "
        f"{name} cannot hold every integer, and a value of {src.numel()} element(s) read for its units "
        f"(a timestep, a position) loses them (judged: a move of {CAST_UNIT} or more)",
        before,
        after,
    )


@torch.no_grad()
def overflow(out: torch.Tensor, ref: torch.Tensor) -> Problem | None:
    """`out` (low dtype) holds inf/NaN where its float32 re-run `ref` is finite."""
    bad = ~torch.isfinite(out) & torch.isfinite(ref)
    if not bool(bad.any()):
        return None
    reached = float(ref[bad].abs().max())
    name = _name(out.dtype)
    limit = torch.finfo(out.dtype).max
    beyond = (
        f"in float32 it reaches {reached:.3g}, above {name}'s {limit:.6g}"
        if reached > limit
        else f"in float32 it stays finite (largest {reached:.3g})"
    )
    return Problem("overflow", out.dtype, f"the result is inf/NaN in {name}: {beyond}", reached)


@torch.no_grad()
def absorbed(acc: torch.Tensor, out: torch.Tensor, ref: torch.Tensor) -> Problem | None:
    """An update of `acc` that float32 makes (`ref` differs from it) and the low dtype rounds
    away (`out` equals it), for most of the elements changed."""
    if acc.shape != out.shape or not acc.numel():
        return None
    wide = acc.detach().float()
    changed = ref != wide
    n_changed = int(changed.sum())
    if not n_changed:
        return None
    lost = int((changed & (out.detach() == acc.detach())).sum())
    share = lost / n_changed
    if share < ABSORBED_SHARE:
        return None
    name = _name(out.dtype)
    scale = float(wide.abs().max())
    return Problem(
        "absorbed",
        out.dtype,
        f"{share:.0%} of the updates ({lost} of {n_changed} elements) leave the value unchanged in "
        f"{name}: each is below half of {name}'s spacing at the value's size (up to {scale:.3g}, "
        f"spacing {ulp(scale, out.dtype):.3g})",
        scale,
        share=share,
    )
