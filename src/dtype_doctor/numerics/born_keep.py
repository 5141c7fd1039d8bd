"""The birth of an op's low dtype at a module-wide cast: keep the module that owns the tensor in float32.

An op whose dtype comes from a module's own parameter or buffer (`torch.arange(n, dtype=self.inv_freq.dtype)`)
is wrong in a low dtype; the fix at the op (positions made float32) leaves the tensor itself rounded,
since the module-wide `model.to(torch.bfloat16)` already cast it. The birth of the precision lost is
that cast: the module is kept in float32 through it (`keep_in_fp32` before it, its outputs cast to
the model's dtype). Named once the run is over, when the module's path in the cast model is known.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import torch
from torch import nn

from .. import remedies
from ..catalog.numerics import KEEP_THROUGH_CAST
from ..causes import root_origin
from ..remedies.places import BIRTH
from ..report import Finding
from ..tracing.casts import MODULE_LOWERING
from . import opsource
from .frames import place, where


def owned(module: nn.Module | None, tensor: torch.Tensor) -> str | None:
    """The attribute name of `tensor` among the module's own parameters and buffers, else None."""
    if module is None:
        return None
    own = (*module.named_parameters(recurse=False), *module.named_buffers(recurse=False))
    return next((name for name, t in own if t is tensor), None)


def _path_in(roots: Iterable[nn.Module], module: nn.Module, name: str | None) -> str | None:
    """`name` (the run's name for the module), when some model called holds the module at that path."""
    if not name:
        return None
    for root in roots:
        try:
            if root.get_submodule(name) is module:
                return name
        except AttributeError:
            continue
    return None


def prepend_keep(finding: Finding, module: nn.Module, tensor: str, roots: Iterable[nn.Module]) -> None:
    """Put the keep-through-the-cast fix first, when the operand's low dtype was born at a cast of
    the model in the user's code and the module's path in it is known."""
    operand = next((o for o in finding.operands if o.origin is not None), None)
    loc = finding.location
    if operand is None or loc is None:
        return
    born = root_origin(operand.origin)
    if born.kind != "cast" or not born.file or not born.line or operand.dtype == "float32":
        return
    kept = _path_in(roots, module, loc.module)
    model = next(
        (r for op in sorted(MODULE_LOWERING) if (r := opsource.receiver(_full(born.file), born.line, op))),
        None,
    )
    if not kept or not model:
        return
    fix = remedies.make(
        KEEP_THROUGH_CAST,
        places={BIRTH: place(born.file, born.line)},
        kept=kept,
        kept_list=repr([kept]),
        model=model,
        tensor=tensor,
        born=where(born.file, born.line),
        dtype_name=operand.dtype,
    )
    if fix is not None:
        finding.fixes.insert(0, fix)


def _full(file: str) -> str:
    return file if os.path.isabs(file) else os.path.abspath(file)
