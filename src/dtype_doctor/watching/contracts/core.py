"""The contract registry: which operands of which op must agree in dtype, and the rule that judges them.

A Contract describes one op by its signature (parameter name → role) and a rule. `register` puts
torch functions and Tensor methods in CONTRACTS, as flop_counter's `register_flop_formula` fills its
registry; the declarations live in this package's op-group modules. `bind` finds the operands in a
call's args/kwargs (so fix mode can put a cast one back in the same place); `judge` returns the
operands that break the rule and the dtype the op needs. Never reads tensor data (works on meta).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from ...catalog.family_codes import AUTOCAST_HALF_CONFLICT
from ..autocast_table import aten_op_name, casting_devices

LOW_DTYPES = (torch.float16, torch.bfloat16)  # the low-precision dtypes (autocast_table.LOW is a policy)


@dataclass(frozen=True)
class Contract:
    op: str  # the name the user reads
    code: str  # catalog family
    params: tuple[
        tuple[str, str], ...
    ]  # (signature parameter, role) in positional order; role "" = no operand
    rule: str = "same"  # a name in RULES
    ref: str | None = None  # role whose dtype the op needs
    autocast: frozenset[str] = frozenset()  # device types whose autocast runs these operands mixed
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
    context: set[str] = field(default_factory=set)  # catalog fix context ("autocast", "module-op")


@dataclass(frozen=True)
class Scene:
    """What the watch session knows around a call, for the rules that need more than the operands."""

    autocast: Callable[[str], torch.dtype | None]  # device type → autocast dtype there, None when off
    module_dtype: Callable[[], torch.dtype | None]  # parameter dtype of the module running the op
    in_user_code: Callable[[], bool]  # the call comes from the user's code, not a library's


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


def floating(slots: list[Slot]) -> list[Slot]:
    return [s for s in slots if s.tensor.is_floating_point()]


def pick(slots: list[Slot], ref: str | None, context: torch.dtype | None) -> torch.dtype:
    """The dtype the op needs: the reference operand's, else the enclosing module's, else the first."""
    if ref is not None:
        for s in slots:
            if s.role == ref:
                return s.tensor.dtype
    dtypes = [s.tensor.dtype for s in slots]
    if context is not None and context in dtypes:
        return context
    return dtypes[0]


Check = Callable[[Contract, list[Slot], "torch.dtype | None"], "Mismatch | None"]
Judge = Callable[[Contract, list[Slot], Scene], "Mismatch | None"]

RULES: dict[str, Check] = {}  # pure dtype checks, given the module's dtype as context
JUDGES: dict[str, Judge] = {}  # rules that decide the whole call themselves (autocast, user code)


def rule(name: str, *, owns_call: bool = False) -> Callable:
    """Register a rule function under `name` (a Contract's `rule`).

    A rule is `(contract, slots, context) -> Mismatch | None`, a pure dtype check; `judge` applies
    autocast and the module's dtype around it. With owns_call=True it is `(contract, slots, scene)`
    and decides the call itself (autocast, user code or library) from the Scene.
    """

    def deco(fn: Callable) -> Callable:
        if name in RULES or name in JUDGES:
            raise RuntimeError(f"duplicate rule {name!r}")
        (JUDGES if owns_call else RULES)[name] = fn
        return fn

    return deco


def evaluate(contract: Contract, slots: list[Slot], context: torch.dtype | None) -> Mismatch | None:
    """The operands that break a pure rule, the module's dtype `context` breaking ties."""
    try:
        fn = RULES[contract.rule]
    except KeyError:
        raise ValueError(f"unknown contract rule {contract.rule!r}") from None
    return fn(contract, slots, context)


def under_autocast(
    contract: Contract, slots: list[Slot], m: Mismatch, autocast: torch.dtype
) -> Mismatch | None:
    """What an enabled autocast makes of a mismatch: None where it casts every odd operand itself
    (the contract's op is in the table for this device); mixed halves are an autocast-half-conflict."""
    if slots[0].tensor.device.type in contract.autocast and all(s.tensor.is_floating_point() for s in m.odd):
        return None
    if any(s.tensor.dtype in LOW_DTYPES and s.tensor.dtype != autocast for s in floating(slots)):
        m.code = AUTOCAST_HALF_CONFLICT
    return m


def judge(contract: Contract, slots: list[Slot], scene: Scene) -> Mismatch | None:
    """The mismatch this call makes, after autocast, with the catalog context of its fixes."""
    own = JUDGES.get(contract.rule)
    m = own(contract, slots, scene) if own is not None else _standard(contract, slots, scene)
    if m is not None and contract.module_op:
        m.context.add("module-op")
    return m


def _standard(contract: Contract, slots: list[Slot], scene: Scene) -> Mismatch | None:
    """A pure rule's mismatch, unless autocast casts the operands; the module's dtype names the odd."""
    m = evaluate(contract, slots, None)
    if m is None:
        return None
    autocast_dtype = scene.autocast(slots[0].tensor.device.type)
    if autocast_dtype is not None:
        m = under_autocast(contract, slots, m, autocast_dtype)
        if m is None:
            return None  # autocast casts every floating operand itself
        m.context.add("autocast")
    if contract.ref is None:
        # which side is odd: the one that disagrees with the module's parameters
        again = evaluate(contract, slots, scene.module_dtype())
        if again is not None:
            again.code, again.context = m.code, m.context
            m = again
    return m


@rule("same")
@rule("indexed")
def _same(contract: Contract, slots: list[Slot], context: torch.dtype | None) -> Mismatch | None:
    fl = floating(slots)
    # matmul/conv/lerp: an integer, bool or complex operand next to a floating one fails as surely
    # as float16 next to float32 (index ops take integer indices, which are not operands here)
    data = slots if contract.rule == "same" and fl else fl
    if len(data) < 2 or all(s.tensor.dtype == data[0].tensor.dtype for s in data):
        return None
    expected = pick(fl, contract.ref, context)
    odd = [s for s in data if s.tensor.dtype != expected]
    code = contract.code
    if contract.bias_code:
        dt = {s.role: s.tensor.dtype for s in data}
        inp = dt.get("input")
        if "bias" in dt and inp != dt["bias"] and (inp is None or inp.is_floating_point):
            code = contract.bias_code
    return Mismatch(expected, odd, code)


CONTRACTS: dict[Any, Contract] = {}


def register(
    *funcs: Any,
    code: str,
    roles: Mapping[str, str | None],
    rule: str = "same",
    op: str | None = None,
    autocast: str | tuple[str, ...] | None = None,
    **fields: Any,
) -> Contract:
    """Give these torch functions (and Tensor methods) one contract; watch and check read CONTRACTS.

    roles: each signature parameter, in positional order, to the role of its operand (None for a
    parameter that is not an operand). op: the name the user reads (default: the first function's).
    autocast: by default the contract reads autocast_table: the device types whose autocast runs the
    op with mixed operands (measured: composite ops included) judge no mismatch there; given
    policies (LOW, FP32, PROMOTE) keep only the devices where the table gives the op one of them.
    fields: the other Contract fields (ref, bias_code, varargs, module_op).
    """
    if rule not in RULES and rule not in JUDGES:
        raise ValueError(f"unknown contract rule {rule!r}")
    name = aten_op_name(funcs[0])
    if autocast is None:
        devices = casting_devices(name)
    else:
        kinds = (autocast,) if isinstance(autocast, str) else autocast
        devices = frozenset().union(*(casting_devices(name, k) for k in kinds))
    params = tuple((param, role or "") for param, role in roles.items())
    contract = Contract(op or name, code, params, rule=rule, autocast=devices, **fields)
    for func in funcs:
        if func in CONTRACTS:
            raise RuntimeError(f"duplicate contract for {func}")
        CONTRACTS[func] = contract
    return contract
