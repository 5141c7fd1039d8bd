"""Op-level scan of one module: which op inside it went non-finite, or first drifted from float32.

Runs a copy of the module on its real (low-precision) inputs under a TorchFunctionMode that also
computes every op on float32 counterparts of its operands (a float32 chain kept in step with the
low-precision one). It names the first op whose low-precision output went non-finite from finite
operands, with the magnitude the float32 chain reached there; failing that, the first op whose
output is further than `threshold` from the float32 chain. One-off (a flagged module only), so
the per-op host reads here cost nothing on the monitored path.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import linecache
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from ..dtypes import dtype_name
from ..tensors import iter_tensors, map_tensors
from ..tracing.inplace import in_place
from .apart import call_apart, rng_state, set_rng_state
from .frames import user_line

_BINOPS = {
    "__add__": ast.Add, "__radd__": ast.Add, "__iadd__": ast.Add, "add": ast.Add,
    "__sub__": ast.Sub, "__rsub__": ast.Sub, "__isub__": ast.Sub, "sub": ast.Sub,
    "__mul__": ast.Mult, "__rmul__": ast.Mult, "__imul__": ast.Mult, "mul": ast.Mult,
    "__truediv__": ast.Div, "__rtruediv__": ast.Div, "__itruediv__": ast.Div, "div": ast.Div,
    "__pow__": ast.Pow, "__rpow__": ast.Pow, "__matmul__": ast.MatMult, "matmul": ast.MatMult,
}  # fmt: skip


@dataclass
class OpHit:
    """The op a scan named: what it is, where it is written, what it did."""

    op: str  # torch name: pow, exp, cumsum, __add__
    expression: str  # the source expression on that line (x.pow(2)), or the op name
    file: str | None
    line: int | None
    kind: str  # nonfinite | error
    low_dtype: str
    fp32_absmax: float  # magnitude the float32 chain reached at this op
    limit: float  # the low dtype's largest finite value
    rel_error: float  # this op's output vs the float32 chain (inf when non-finite)
    inputs_absmax: float  # largest operand magnitude in low precision


def _floats(obj: Any) -> list[torch.Tensor]:
    return [t for t in iter_tensors(obj, max_depth=3) if t.is_floating_point() and t.numel()]


def expression(op: str, file: str | None, line: int | None) -> str:
    """The source text of the op's call on its line: `x.pow(2)` for pow, `a + b` for __add__."""
    text = linecache.getline(file, line).strip() if file and line else ""
    if not text:
        return op
    try:
        tree = ast.parse(text.rstrip(":").removeprefix("return ").removeprefix("elif ").removeprefix("if "))
    except SyntaxError:
        return text
    source = ast.unparse(tree)
    name = op.strip("_").removeprefix("r").removeprefix("i") if op.startswith("__") else op
    binop = _BINOPS.get(op)
    for node in ast.walk(tree):
        if binop is not None and isinstance(node, ast.BinOp) and isinstance(node.op, binop):
            return ast.unparse(node)
        if isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if called in (name, op):
                return ast.unparse(node)
    return source


class _Scan(TorchFunctionMode):
    def __init__(self, device: str, threshold: float) -> None:
        super().__init__()
        self.device = device
        self.threshold = threshold
        self.twins: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.hit: OpHit | None = None

    def twin(self, t: torch.Tensor, inplace: bool) -> torch.Tensor:
        entry = self.twins.get(id(t))
        if entry is not None and entry[0] is t:
            return entry[1].clone() if inplace else entry[1]
        if not t.is_floating_point():
            return t
        return t.detach().to(torch.float32, copy=True) if inplace or t.dtype != torch.float32 else t.detach()

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if self.hit is not None:
            return func(*args, **kwargs)
        name = getattr(func, "__name__", str(func))
        inplace = in_place(name)[1] or "out" in kwargs
        # an in-place op overwrites its operand: what it read is taken before it runs
        before = self._operands(args, kwargs, inplace) if inplace else None
        out = func(*args, **kwargs)
        low_out = _floats(out)
        if not low_out or not any(t.dtype in (torch.float16, torch.bfloat16) for t in low_out):
            return out
        with contextlib.suppress(Exception):  # a failed float32 replay: its output starts a fresh chain
            self._compare(func, name, before or self._operands(args, kwargs, inplace), low_out)
        return out

    def _operands(self, args: tuple, kwargs: dict, inplace: bool) -> tuple[tuple, bool, float]:
        """The float32 counterparts of the op's operands; whether its own operands are all finite,
        and their largest magnitude."""
        up = map_tensors((args, kwargs), lambda t: self.twin(t, inplace))
        ins = _floats((args, kwargs))
        absmax = max((float(t.abs().max()) for t in ins), default=0.0)
        return up, all(bool(torch.isfinite(t).all()) for t in ins), absmax

    def _compare(self, func: Any, name: str, operands: tuple, low_out: list[torch.Tensor]) -> None:
        up, finite_in, inputs_absmax = operands
        with torch.no_grad(), torch.autocast(self.device, enabled=False):
            ref = func(*up[0], **up[1])
        ref_out = _floats(ref)
        if len(ref_out) != len(low_out):
            return
        for low, r in zip(low_out, ref_out, strict=True):
            r = r.float()
            self.twins[id(low)] = (low, r)
            if not finite_in or low.shape != r.shape:
                continue
            bad = not bool(torch.isfinite(low).all())
            err = math.inf if bad else _rel(low, r)
            if bad or err > self.threshold:
                file, line = user_line()
                limit = float(torch.finfo(low.dtype).max)
                self.hit = OpHit(
                    op=name,
                    expression=expression(name, file, line),
                    file=file,
                    line=line,
                    kind="nonfinite" if bad else "error",
                    low_dtype=dtype_name(low.dtype),
                    fp32_absmax=float(r.abs().max()) if r.numel() else 0.0,
                    limit=limit,
                    rel_error=err,
                    inputs_absmax=inputs_absmax,
                )
                return


def _rel(low: torch.Tensor, ref: torch.Tensor) -> float:
    return rel_l2([low], [ref])


def in_range_parts(low: torch.Tensor, ref: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(low - ref, ref) over the elements whose reference fits the low dtype, on the device.

    A value beyond the low dtype's range is not an error of its arithmetic: an additive mask of
    torch.finfo(dtype).min is -65504 in float16 and -3.4e38 in float32 (an overflow to inf is told
    apart as non-finite already)."""
    ref = ref.float()
    keep = ref.abs() <= torch.finfo(low.dtype).max
    zero = torch.zeros((), device=ref.device)
    return torch.where(keep, low.detach().float() - ref, zero), torch.where(keep, ref, zero)


def rel_l2(lows: Sequence[torch.Tensor], refs: Sequence[torch.Tensor]) -> float:
    """Relative L2 error of tensors against their references, all together (0 for a zero reference)."""
    parts = [in_range_parts(lo, r) for lo, r in zip(lows, refs, strict=True)]
    num = sum(float(torch.linalg.vector_norm(d)) ** 2 for d, _ in parts)
    den = sum(float(torch.linalg.vector_norm(r)) ** 2 for _, r in parts)
    if den == 0 or not math.isfinite(den):
        return 0.0
    return math.sqrt(num / den)


_HOOKS = (
    "_forward_hooks",
    "_forward_pre_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_forward_pre_hooks_with_kwargs",
    "_backward_hooks",
    "_backward_pre_hooks",
)


def copy_without_hooks(module: nn.Module, memo: dict | None = None) -> nn.Module:
    """A deep copy with none of the module hooks (the user's, a watching session's, ours): hooks
    hold objects that cannot or must not be copied, and the copy is for the tool's own runs."""
    saved = []
    for sub in module.modules():
        hooks = {name: sub.__dict__[name] for name in _HOOKS if name in sub.__dict__}
        saved.append((sub, hooks))
        for name, value in hooks.items():
            sub.__dict__[name] = type(value)()
    try:
        return copy.deepcopy(module, memo=dict(memo or {}))
    finally:
        for sub, hooks in saved:
            sub.__dict__.update(hooks)


def scan_ops(module: nn.Module, args: tuple, kwargs: dict, threshold: float = 0.1) -> OpHit | None:
    """Run a copy of `module` on (args, kwargs) and name the op that went wrong; None if none did.

    The copy has no hooks (the user's and ours), runs under no_grad, and the RNG is restored
    afterwards, so the user's run goes on exactly as without the scan.
    """
    twin = copy_without_hooks(module)
    device = next((t.device.type for t in iter_tensors((args, kwargs))), "cpu")
    state = rng_state()
    scan = _Scan(device, threshold)
    a, k = map_tensors((args, kwargs), lambda t: t.detach().clone())
    try:
        with torch.no_grad(), scan:
            call_apart(twin, *a, **k)
    except Exception:
        pass  # the op before the failure may already be named
    finally:
        set_rng_state(state)
    return scan.hit
