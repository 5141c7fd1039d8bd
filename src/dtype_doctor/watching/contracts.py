"""Which operands of which op must agree in dtype, and the role each one plays.

A Contract describes one op by its signature (parameter name → role) and a rule.
`bind` finds the operands in a call's args/kwargs (so fix mode can put a cast one
back in the same place); `evaluate` returns the operands that break the rule and
the dtype the op needs. The rules follow what each op does on torch 2.13, probed op by op.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from ..catalog.family_codes import (
    ATTENTION_DTYPE_MISMATCH,
    AUTOCAST_HALF_CONFLICT,
    CONV_BIAS_DTYPE_MISMATCH,
    CONV_WEIGHT_DTYPE_MISMATCH,
    INDEX_PUT_DTYPE_MISMATCH,
    MATMUL_DTYPE_MISMATCH,
    NORM_DTYPE_MISMATCH,
    SCALAR_TYPE_MISMATCH,
    SILENT_PROMOTION,
)
from .autocast_table import FP32, PROMOTE, casting_devices
from .autocast_table import LOW as LOW_POLICY

LOW = (torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class Contract:
    op: str  # the name the user reads
    code: str  # catalog family
    params: tuple[
        tuple[str, str], ...
    ]  # (signature parameter, role) in positional order; role "" = no operand
    rule: str = "same"  # same | norm | attention | indexed | indices | list | setitem
    ref: str | None = None  # role whose dtype the op needs
    autocast: frozenset[str] = frozenset()  # device types whose autocast casts these operands itself
    bias_code: str | None = None  # family when the input disagrees with the bias (conv: checked first)
    varargs: bool = False  # operands follow the named params as *args (einsum)
    module_op: bool = False  # the op of an nn layer: the weight decides the dtype


@dataclass
class Slot:
    """One tensor operand and where it sits in the call: ("a", i), ("k", name), or with a list index."""

    role: str
    tensor: Any
    where: tuple


@dataclass
class Mismatch:
    expected: torch.dtype
    odd: list[Slot]
    code: str


def _tensor(x: Any) -> bool:
    return isinstance(x, torch.Tensor)


def bind(contract: Contract, args: tuple, kwargs: dict) -> list[Slot]:
    slots: list[Slot] = []
    n = len(args)
    for i, (param, role) in enumerate(contract.params):
        if i < n:
            value, where = args[i], ("a", i)
        elif param in kwargs:
            value, where = kwargs[param], ("k", param)
        else:
            continue
        if not role:
            continue
        if _tensor(value):
            slots.append(Slot(role, value, where))
        elif contract.rule == "list" and isinstance(value, (list, tuple)):
            slots.extend(Slot(f"{role}[{j}]", v, (*where, j)) for j, v in enumerate(value) if _tensor(v))
    if contract.varargs:
        start = len(contract.params)
        rest = args[start:]
        if len(rest) == 1 and isinstance(rest[0], (list, tuple)):
            slots.extend(Slot(f"operand{j}", v, ("a", start, j)) for j, v in enumerate(rest[0]) if _tensor(v))
        else:
            slots.extend(Slot(f"operand{j}", v, ("a", start + j)) for j, v in enumerate(rest) if _tensor(v))
    return slots


def put(args: tuple, kwargs: dict, where: tuple, value: Any) -> tuple[tuple, dict]:
    """Return args/kwargs with the operand at `where` replaced (used by fix mode)."""
    if where[0] == "k":
        kwargs = dict(kwargs)
        if len(where) == 3:
            seq = list(kwargs[where[1]])
            seq[where[2]] = value
            kwargs[where[1]] = type(kwargs[where[1]])(seq) if isinstance(kwargs[where[1]], tuple) else seq
        else:
            kwargs[where[1]] = value
        return args, kwargs
    items = list(args)
    if len(where) == 3:
        old = items[where[1]]
        seq = list(old)
        seq[where[2]] = value
        items[where[1]] = tuple(seq) if isinstance(old, tuple) else seq
    else:
        items[where[1]] = value
    return tuple(items), kwargs


def _floating(slots: list[Slot]) -> list[Slot]:
    return [s for s in slots if s.tensor.is_floating_point()]


def _pick(slots: list[Slot], ref: str | None, context: torch.dtype | None) -> torch.dtype:
    """The dtype the op needs: the reference operand's, else the enclosing module's, else the first."""
    if ref is not None:
        for s in slots:
            if s.role == ref:
                return s.tensor.dtype
    dtypes = [s.tensor.dtype for s in slots]
    if context is not None and context in dtypes:
        return context
    return dtypes[0]


RULES: dict[str, Callable[[Contract, list[Slot], torch.dtype | None], Mismatch | None]] = {}


def rule(name: str) -> Callable:
    """Register a rule function under `name` (a Contract's `rule`), as flop_counter registers formulas."""

    def deco(fn: Callable) -> Callable:
        RULES[name] = fn
        return fn

    return deco


def evaluate(contract: Contract, slots: list[Slot], context: torch.dtype | None) -> Mismatch | None:
    """The operands that break the contract, or None. Never reads tensor data (works on meta)."""
    try:
        fn = RULES[contract.rule]
    except KeyError:
        raise ValueError(f"unknown contract rule {contract.rule!r}") from None
    return fn(contract, slots, context)


@rule("same")
@rule("indexed")
def _same(contract: Contract, slots: list[Slot], context: torch.dtype | None) -> Mismatch | None:
    fl = _floating(slots)
    # matmul/conv/lerp: an integer, bool or complex operand next to a floating one fails as surely
    # as float16 next to float32 (index ops take integer indices, which are not operands here)
    data = slots if contract.rule == "same" and fl else fl
    if len(data) < 2 or all(s.tensor.dtype == data[0].tensor.dtype for s in data):
        return None
    expected = _pick(fl, contract.ref, context)
    odd = [s for s in data if s.tensor.dtype != expected]
    code = contract.code
    if contract.bias_code:
        dt = {s.role: s.tensor.dtype for s in data}
        inp = dt.get("input")
        if "bias" in dt and inp != dt["bias"] and (inp is None or inp.is_floating_point):
            code = contract.bias_code
    return Mismatch(expected, odd, code)


@rule("indices")
def _indices(contract: Contract, slots: list[Slot], context: torch.dtype | None) -> Mismatch | None:
    idx = next((s for s in slots if s.role == "indices"), None)
    if idx is not None and idx.tensor.dtype not in (torch.int64, torch.int32):
        return Mismatch(torch.int64, [idx], contract.code)
    return None


@rule("list")
def _list(contract: Contract, slots: list[Slot], context: torch.dtype | None) -> Mismatch | None:
    fl = _floating(slots)
    if len(fl) < 2 or all(s.tensor.dtype == fl[0].tensor.dtype for s in fl):
        return None
    low = [s.tensor.dtype for s in fl if s.tensor.dtype in LOW]
    expected = context if context is not None and context in {s.tensor.dtype for s in fl} else None
    expected = expected or (low[0] if low else fl[0].tensor.dtype)
    return Mismatch(expected, [s for s in fl if s.tensor.dtype != expected], contract.code)


def under_autocast(
    contract: Contract, slots: list[Slot], m: Mismatch, autocast: torch.dtype
) -> Mismatch | None:
    """What an enabled autocast makes of a mismatch: None where it casts every odd operand itself
    (the contract's op is in the table for this device); mixed halves are an autocast-half-conflict."""
    if slots[0].tensor.device.type in contract.autocast and all(s.tensor.is_floating_point() for s in m.odd):
        return None
    if any(s.tensor.dtype in LOW and s.tensor.dtype != autocast for s in _floating(slots)):
        m.code = AUTOCAST_HALF_CONFLICT
    return m


def list_under_autocast(floating: list[Slot], autocast: torch.dtype) -> Mismatch | None:
    """cat/stack under autocast promote float32 with the autocast dtype, but a half of the other kind
    fails in autocast's prioritize."""
    bad = [s for s in floating if s.tensor.dtype in LOW and s.tensor.dtype != autocast]
    return Mismatch(autocast, bad, AUTOCAST_HALF_CONFLICT) if bad else None


@rule("norm")
def _norm(contract: Contract, slots: list[Slot], context: torch.dtype | None = None) -> Mismatch | None:
    inp = next((s for s in slots if s.role == "input"), None)
    params = [s for s in slots if s.role in ("weight", "bias") and s.tensor.is_floating_point()]
    if inp is None or not params:
        return None
    pdt = params[0].tensor.dtype
    odd = [s for s in params if s.tensor.dtype != pdt]
    if odd:
        return Mismatch(pdt, odd, contract.code)
    if not inp.tensor.is_floating_point():  # an integer/bool/complex input to a floating norm
        return Mismatch(pdt, [inp], contract.code)
    x = inp.tensor.dtype
    # CPU and CUDA accept a reduced-precision input with float32 parameters, not the reverse
    if x == pdt or (pdt == torch.float32 and x in LOW):
        return None
    return Mismatch(pdt, [inp], contract.code)


@rule("attention")
def _attention(contract: Contract, slots: list[Slot], context: torch.dtype | None) -> Mismatch | None:
    qkv = [s for s in slots if s.role in ("query", "key", "value")]
    if not qkv:
        return None
    q = qkv[0].tensor.dtype
    if any(s.tensor.dtype != q for s in qkv):
        expected = _pick(qkv, None, context)
        return Mismatch(expected, [s for s in qkv if s.tensor.dtype != expected], contract.code)
    mask = next((s for s in slots if s.role == "mask"), None)
    if mask is not None and mask.tensor.dtype not in (torch.bool, torch.float32, q):
        return Mismatch(q, [mask], contract.code)
    return None


@rule("setitem")
def _setitem(contract: Contract, slots: list[Slot], context: torch.dtype | None = None) -> Mismatch | None:
    dst = next((s for s in slots if s.role == "destination"), None)
    val = next((s for s in slots if s.role == "value"), None)
    if dst is None or val is None or val.tensor.dtype == dst.tensor.dtype:
        return None
    key = next((s for s in slots if s.role == "index"), None)
    if key is None:
        return None  # basic indexing copies into the destination, casting it
    if key.tensor.dtype == torch.bool and val.tensor.numel() == 1:
        return None  # goes through masked_fill, which casts
    return Mismatch(dst.tensor.dtype, [val], contract.code)


def _c(op: str, code: str, *params: str, **kw: Any) -> Contract:
    pairs = tuple((p.split(":")[0], p.split(":")[-1] if ":" in p else "") for p in params)
    return Contract(op, code, pairs, **kw)


def _norm_contract(op: str, *params: str) -> Contract:
    """A normalisation op's contract: the input, then the op's own parameters (weight, bias ...)."""
    # autocast puts norms in its fp32 list on CUDA-like devices; CPU autocast leaves them alone
    autocast = casting_devices(op, FP32)
    return _c(op, _NORM, "input:input", *params, rule="norm", autocast=autocast, module_op=True)


_MM = MATMUL_DTYPE_MISMATCH


def _ac(name: str) -> frozenset[str]:
    """The device types whose autocast casts this op's operands to its low dtype itself."""
    return casting_devices(name, LOW_POLICY)


LINEAR = _c(
    "F.linear",
    _MM,
    "input:input",
    "weight:weight",
    "bias:bias",
    ref="weight",
    autocast=_ac("linear"),
    module_op=True,
)
ADDMM = _c("addmm", _MM, "input:bias", "mat1:input", "mat2:weight", ref="weight", autocast=_ac("addmm"))
MM = _c("mm", _MM, "input:input", "mat2:other", autocast=_ac("mm"))
MATMUL = _c("matmul", _MM, "input:input", "other:other", autocast=_ac("matmul"))
BMM = _c("bmm", _MM, "input:input", "mat2:other", autocast=_ac("bmm"))
BADDBMM = _c("baddbmm", _MM, "input:bias", "batch1:batch1", "batch2:batch2", autocast=_ac("baddbmm"))
DOT = _c("dot", _MM, "input:input", "tensor:other")
EINSUM = _c("einsum", _MM, "equation", varargs=True, autocast=_ac("einsum"))


def _conv(name: str) -> Contract:
    return _c(
        name,
        CONV_WEIGHT_DTYPE_MISMATCH,
        "input:input",
        "weight:weight",
        "bias:bias",
        ref="weight",
        autocast=_ac(name),
        bias_code=CONV_BIAS_DTYPE_MISMATCH,
        module_op=True,
    )


_NORM = NORM_DTYPE_MISMATCH
_IDX = INDEX_PUT_DTYPE_MISMATCH


def _table() -> dict[Any, Contract]:
    T = torch.Tensor
    t: dict[Any, Contract] = {F.linear: LINEAR, torch.addmm: ADDMM, T.addmm: ADDMM}
    for f in (torch.mm, T.mm):
        t[f] = MM
    for f in (torch.matmul, T.matmul, T.__matmul__):
        t[f] = MATMUL
    t[T.__rmatmul__] = _c("matmul", _MM, "self:other", "other:input", autocast=_ac("matmul"))
    for f in (torch.bmm, T.bmm):
        t[f] = BMM
    for f in (torch.baddbmm, T.baddbmm):
        t[f] = BADDBMM
    for f in (torch.dot, T.dot, torch.inner, T.inner):
        t[f] = DOT
    t[torch.einsum] = EINSUM
    for name in ("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"):
        t[getattr(F, name)] = _conv(name)
    t[F.layer_norm] = _norm_contract("layer_norm", "normalized_shape", "weight:weight", "bias:bias")
    t[F.group_norm] = _norm_contract("group_norm", "num_groups", "weight:weight", "bias:bias")
    if hasattr(F, "rms_norm"):
        t[F.rms_norm] = _norm_contract("rms_norm", "normalized_shape", "weight:weight")
    for name in ("batch_norm", "instance_norm"):
        t[getattr(F, name)] = _c(
            name,
            _NORM,
            "input:input",
            "running_mean",
            "running_var",
            "weight:weight",
            "bias:bias",
            rule="norm",
            module_op=True,
        )
    t[F.scaled_dot_product_attention] = _c(
        "scaled_dot_product_attention",
        ATTENTION_DTYPE_MISMATCH,
        "query:query",
        "key:key",
        "value:value",
        "attn_mask:mask",
        rule="attention",
        autocast=_ac("scaled_dot_product_attention"),
    )
    put_ = _c(
        "index_put_", _IDX, "self:destination", "indices", "values:values", rule="indexed", ref="destination"
    )
    for f in (T.index_put_, T.index_put, torch.index_put):
        t[f] = (
            put_
            if f is T.index_put_
            else _c(
                "index_put",
                _IDX,
                "input:destination",
                "indices",
                "values:values",
                rule="indexed",
                ref="destination",
            )
        )
    t[T.__setitem__] = _c(
        "__setitem__ (x[idx] = v)", _IDX, "self:destination", "key:index", "value:value", rule="setitem"
    )
    for name in ("index_add_", "index_add", "index_copy_", "index_copy"):
        t[getattr(T, name)] = _c(
            name, _IDX, "self:destination", "dim", "index", "source:source", rule="indexed", ref="destination"
        )
    t[torch.index_add] = _c(
        "index_add",
        _IDX,
        "input:destination",
        "dim",
        "index",
        "source:source",
        rule="indexed",
        ref="destination",
    )
    for name in ("scatter_", "scatter", "scatter_add_", "scatter_add", "scatter_reduce_", "scatter_reduce"):
        t[getattr(T, name)] = _c(
            name, _IDX, "self:destination", "dim", "index", "src:source", rule="indexed", ref="destination"
        )
    for f in (torch.scatter, torch.scatter_add, torch.scatter_reduce):
        t[f] = _c(
            f.__name__,
            _IDX,
            "input:destination",
            "dim",
            "index",
            "src:source",
            rule="indexed",
            ref="destination",
        )
    for name in ("masked_scatter_", "masked_scatter"):
        t[getattr(T, name)] = _c(
            name, _IDX, "self:destination", "mask", "source:source", rule="indexed", ref="destination"
        )
    t[torch.masked_scatter] = _c(
        "masked_scatter",
        _IDX,
        "input:destination",
        "mask",
        "source:source",
        rule="indexed",
        ref="destination",
    )
    lerp = _c("lerp", SCALAR_TYPE_MISMATCH, "input:start", "end:end", "weight:weight", ref="start")
    for f in (torch.lerp, T.lerp, T.lerp_):
        t[f] = lerp
    t[F.embedding] = _c(
        "embedding", SCALAR_TYPE_MISMATCH, "input:indices", "weight:weight", rule="indices", module_op=True
    )
    t[F.embedding_bag] = _c(
        "embedding_bag",
        SCALAR_TYPE_MISMATCH,
        "input",
        "weight:weight",
        "offsets",
        "max_norm",
        "norm_type",
        "scale_grad_by_freq",
        "mode",
        "sparse",
        "per_sample_weights:per_sample_weights",
        ref="weight",
        module_op=True,
    )
    for f in (
        torch.cat,
        torch.concat,
        torch.concatenate,
        torch.stack,
        torch.hstack,
        torch.vstack,
        torch.dstack,
    ):
        t[f] = _c(f"torch.{f.__name__}", SILENT_PROMOTION, "tensors:tensors", rule="list")
    return t


CONTRACTS: dict[Any, Contract] = _table()


def register(*funcs: Any, contract: Contract) -> Contract:
    """Give these torch functions (and Tensor methods) a contract; watch and check read CONTRACTS."""
    for func in funcs:
        CONTRACTS[func] = contract
    return contract


def _autocasts(name: str) -> frozenset[str]:
    """Devices whose autocast casts every floating operand of `name` itself (to any one dtype)."""
    return _ac(name) | casting_devices(name, FP32) | casting_devices(name, PROMOTE)


# ops whose meta kernels skip the dtype check their CPU/CUDA kernels make (probed on torch 2.13)
register(
    torch.mv, torch.Tensor.mv, contract=_c("mv", _MM, "input:input", "vec:other", autocast=_autocasts("mv"))
)
register(
    torch.addmv,
    torch.Tensor.addmv,
    contract=_c("addmv", _MM, "input:bias", "mat:input", "vec:other", autocast=_autocasts("addmv")),
)
register(torch.cdist, contract=_c("cdist", _MM, "x1:input", "x2:other", autocast=_autocasts("cdist")))
register(
    torch.cross,
    torch.Tensor.cross,
    contract=_c("cross", SCALAR_TYPE_MISMATCH, "input:input", "other:other", autocast=_autocasts("cross")),
)
