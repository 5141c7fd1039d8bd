"""`Attempting to unscale FP16 gradients`: which parameters are fp16, and who made them."""

from __future__ import annotations

import re
from typing import Any

import torch
from torch import nn

from .. import catalog
from ..catalog.family_codes import FP16_GRADIENT_UNSCALE
from ..numerics import kept_births
from ..numerics.frames import place
from ..numerics.frames import where as shown_at
from ..remedies.places import BIRTH
from ..report import Finding, Location, Operand, Origin
from .modules import Names
from .provenance import Provenance, caller_frames, tag_to_origin, where
from .rounded_updates import dtype_birth

_ADAPTER = re.compile(r"lora|adapter|peft|ia3|prefix", re.IGNORECASE)
_SHOWN = 8


def _adapter_of(qual: str, names: Names) -> list[str]:
    """The nearest module above a parameter whose type or name says adapter/LoRA: 'LoRALinear at '2''."""
    path = qual.rpartition(".")[0]
    for mod_path, mod in names.ancestors(path):
        if _ADAPTER.search(type(mod).__name__):
            return [f"{type(mod).__name__} at '{mod_path or '<root>'}'"]
    if _ADAPTER.search(qual):
        return [f"{type(o).__name__} at '{p}'" for p, o in names.ancestors(path)[:1]]
    return []


def fp16_gradient_finding(
    optimizer: Any, names: Names, prov: Provenance, root: nn.Module | None
) -> Finding | None:
    total = 0
    bad: list[tuple[str, torch.Tensor, nn.Module | None]] = []
    for gi, group in enumerate(getattr(optimizer, "param_groups", ())):
        for pi, p in enumerate(group.get("params", ())):
            total += 1
            if p.grad is None or p.grad.dtype != torch.float16:
                continue
            known = names.tensor(p)
            if known is None:
                bad.append((f"param_groups[{gi}]['params'][{pi}]", p, None))
            else:
                bad.append((known[1], p, known[2]))
    if not bad:
        return None
    owners: dict[str, str] = {}
    operands = []
    for qual, p, owner in bad[:_SHOWN]:
        mod_path = names.module(owner) if owner is not None else None
        if owner is not None:
            owners[qual] = type(owner).__name__
        operands.append(
            Operand(
                role="parameter",
                dtype="float16",
                shape=list(p.shape),
                name=qual,
                origin=_origin(p, prov, names)
                or Origin(kind="parameter", name=qual, module=mod_path, op=owners.get(qual), dtype="float16"),
            )
        )
    adapters = sorted({a for q, _, owner in bad if owner is not None for a in _adapter_of(q, names)})
    context = {"all-params-fp16" if len(bad) == total else "some-params-fp16"}
    if adapters:
        context.add("adapter")
    first_qual, _, first_owner = bad[0]
    shown = ", ".join(f"{q} ({owners[q]})" if q in owners else q for q, _, _ in bad[:_SHOWN])
    more = f" and {len(bad) - _SHOWN} more" if len(bad) > _SHOWN else ""
    message = f"GradScaler.unscale_: {len(bad)} of {total} parameters have float16 gradients: {shown}{more}"
    if adapters:
        message += (
            f"; they belong to {', '.join(adapters)}, which created them in the base model's float16 "
            "instead of float32"
        )
    inner, _ = caller_frames(3)
    file, line, function = where(inner)
    born = _born_fix(bad[0][1], prov)
    if born:
        context.add("trainable-born")
        message += f"; they were made float16 at {born['born']}"
    return catalog.finding(
        FP16_GRADIENT_UNSCALE,
        context=context,
        names={
            "param": first_qual,
            "module": names.module(first_owner) if first_owner is not None else None,
            "module_class": type(first_owner).__name__ if first_owner is not None else None,
            "component": type(root).__name__ if root is not None else None,
            "dtype": "torch.float32",
            "other_dtype": "torch.float16",
            "file": file,
            "line": line,
            **born,
        },
        message=message,
        location=Location(op="GradScaler.unscale_", file=file, line=line, function=function),
        operands=operands,
        data={"fp16_params": [q for q, _, _ in bad], "owners": owners, "total_params": total},
    )


def _origin(p: torch.Tensor, prov: Provenance, names: Names) -> Origin | None:
    """Where the watch saw `p` made float16 (a module-wide cast, a load), as an Origin."""
    tag = prov.lookup(p)
    return tag_to_origin(tag, names.module) if tag is not None and tag.dtype == p.dtype else None


def _born_fix(p: torch.Tensor, prov: Provenance) -> dict[str, Any]:
    """The names of the fix at the statement that made `p` float16: the trainable parameters kept
    (or cast back to) float32 there (`kept_births`); {} when it is not known."""
    file, line = dtype_birth(prov, p)
    fix = kept_births.trainable_fp32(file, line)
    at = place(file, line)
    if not fix or at is None:
        return {}
    return {"born": shown_at(file, line), "born_fix": fix, "places": {BIRTH: at}}
