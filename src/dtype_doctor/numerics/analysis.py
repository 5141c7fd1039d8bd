"""One step's records → the first producers of non-finite values, forward and backward.

Pure Python on the values read back from the device: no torch here, so the rules are easy
to read and to test.

Forward rule: in execution order, a module call is the producer when one of its outputs is
non-finite, every floating input was finite, and nothing inside it (a child, an op between
children) went non-finite first. A tensor first seen as an input (made by code between
modules, or a model input) is the producer when it is the first non-finite thing of the step.
Backward rule: the first non-finite gradient in backward order; the module(s) that consumed
that tensor in forward made it in their backward (or the module owning a weight gradient).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .stats import ABSMAX, MAX, MIN_NONZERO


@dataclass(slots=True)
class TensorInfo:
    dtype: str
    shape: tuple[int, ...]
    numel: int


@dataclass(slots=True)
class Call:
    """A module call in forward: `start` is the index of the first record made inside it."""

    path: str
    module_type: str
    start: int
    in_slots: list[int] = field(default_factory=list)
    in_names: list[str] = field(default_factory=list)
    out_slots: list[int] = field(default_factory=list)
    leaf: bool = True
    caller: str | None = None  # the module whose forward made this call (None: outermost)


@dataclass(slots=True)
class Sighting:
    """A tensor first seen as a module input: a model input (scope None) or made by code in `scope`."""

    slot: int
    scope: str | None
    consumer: str
    name: str


@dataclass
class Grad:
    """A gradient in backward order: of a forward tensor (`of_slot`) or of a parameter (`param`)."""

    slot: int
    of_slot: int | None = None
    param: str | None = None


@dataclass
class Shadow:
    """The producer re-run in float32 on the same inputs (next monitored step)."""

    path: str
    slots: list[int]


@dataclass
class Operand:
    name: str
    dtype: str
    shape: tuple[int, ...]
    absmax: float
    min_nonzero: float


@dataclass
class Producer:
    phase: str  # forward | backward
    step: int
    kind: str  # module | inline | input | weight-grad | loss
    path: str | None
    module_type: str | None
    dtype: str
    value: str  # inf | nan
    inputs: list[Operand] = field(default_factory=list)
    passed_on: list[str] = field(default_factory=list)
    param: str | None = None
    leaf: bool = True
    caller: str | None = None
    consequence_of: str | None = None  # backward: the forward producer whose inf/NaN it inherited


def _bad(values: list[list[float]], slot: int) -> bool:
    return not math.isfinite(values[slot][ABSMAX])


def _value(values: list[list[float]], slot: int) -> str:
    return "nan" if math.isnan(values[slot][ABSMAX]) else "inf"


def _operand(values: list[list[float]], infos: list[TensorInfo], slot: int, name: str) -> Operand:
    info = infos[slot]
    row = values[slot]
    return Operand(name, info.dtype, info.shape, row[ABSMAX], row[MIN_NONZERO])


def mask_slots(records: list[Call | Sighting], values: list[list[float]]) -> set[int]:
    """Tensors made between modules whose only non-finite values are -inf: additive attention masks."""
    return {
        rec.slot
        for rec in records
        if isinstance(rec, Sighting)
        and math.isinf(values[rec.slot][ABSMAX])
        and not math.isnan(values[rec.slot][MAX])
        and values[rec.slot][MAX] < math.inf
    }


def forward_producers(
    records: list[Call | Sighting], values: list[list[float]], infos: list[TensorInfo], step: int
) -> list[Producer]:
    producers: list[Producer] = []
    if all(math.isfinite(row[ABSMAX]) for row in values):
        return producers  # the common step: nothing non-finite anywhere
    masks = mask_slots(records, values)

    def bad(slot: int) -> bool:
        return slot not in masks and _bad(values, slot)

    last_bad = -1
    for index, rec in enumerate(records):
        if isinstance(rec, Sighting):
            if bad(rec.slot):
                if last_bad < 0:
                    producers.append(
                        Producer(
                            phase="forward",
                            step=step,
                            kind="input" if rec.scope is None else "inline",
                            path=rec.scope if rec.scope is not None else rec.consumer,
                            module_type=None,
                            dtype=infos[rec.slot].dtype,
                            value=_value(values, rec.slot),
                            inputs=[_operand(values, infos, rec.slot, rec.name)],
                            leaf=False,
                        )
                    )
                last_bad = index
            continue
        new_outs = [s for s in rec.out_slots if s not in rec.in_slots]
        if not any(bad(s) for s in rec.out_slots):
            continue
        inputs_ok = not any(bad(s) for s in rec.in_slots)
        if inputs_ok and last_bad < rec.start and any(bad(s) for s in new_outs):
            out = next(s for s in new_outs if bad(s))
            producers.append(
                Producer(
                    phase="forward",
                    step=step,
                    kind="module",
                    path=rec.path,
                    module_type=rec.module_type,
                    dtype=infos[out].dtype,
                    value=_value(values, out),
                    inputs=[
                        _operand(values, infos, s, n) for s, n in zip(rec.in_slots, rec.in_names, strict=True)
                    ],
                    leaf=rec.leaf,
                    caller=rec.caller,
                )
            )
        elif producers and not (last_bad >= rec.start and inputs_ok):
            producers[-1].passed_on.append(rec.path)  # took a non-finite input and passed it on
        last_bad = index
    return producers


def backward_producer(
    grads: list[Grad],
    values: list[list[float]],
    infos: list[TensorInfo],
    consumers: dict[int, list[Call]],
    made_by: dict[int, str | None],
    step: int,
) -> Producer | None:
    """The first non-finite gradient in backward order, attributed to whoever computed it."""
    for grad in grads:
        if not _bad(values, grad.slot):
            continue
        value = _value(values, grad.slot)
        dtype = infos[grad.slot].dtype
        if grad.param is not None:
            path = grad.param.rpartition(".")[0]
            return Producer("backward", step, "weight-grad", path, None, dtype, value, param=grad.param)
        users = consumers.get(grad.of_slot, []) if grad.of_slot is not None else []
        if not users:
            # nothing downstream in the model: the gradient arrived non-finite from the loss
            return Producer("backward", step, "loss", made_by.get(grad.of_slot), None, dtype, value)
        first = users[0]
        producer = Producer(
            "backward", step, "module", first.path, first.module_type, dtype, value, leaf=first.leaf
        )
        producer.passed_on = [u.path for u in users[1:]]
        return producer
    return None


def mark_consequence(forward: list[Producer], back: Producer) -> None:
    """A backward non-finite in a module whose forward input was already non-finite (or arriving
    from a non-finite loss) follows from the forward producer: name that one as its cause."""
    for fp in forward:
        if fp.phase != "forward":
            continue
        reached = {fp.path, *fp.passed_on}
        if back.kind == "loss" or back.path in reached:
            back.consequence_of = fp.path if fp.path is not None else "<input>"
            return
