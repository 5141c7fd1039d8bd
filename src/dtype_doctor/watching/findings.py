"""Turning what the watcher saw (operands, module, frames) into catalog Findings and notes."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .. import catalog
from ..dtypes import canonical
from ..report import Finding, Location, Operand, Origin
from .modules import Names
from .provenance import SKIP, Provenance, caller_frames, frame_kind, tag_to_origin, where


def torch_name(dtype: torch.dtype | None) -> str | None:
    return None if dtype is None else str(dtype)


@dataclass
class Seen:
    """One operand as the finding will show it."""

    role: str
    tensor: torch.Tensor
    odd: bool = False
    origin: Origin | None = field(default=None)


def entry_call(depth: int = 2) -> tuple[nn.Module, str, dict[str, Any]] | None:
    """The outermost live call of a module method: (module, method name, its arguments).

    This is the entry point the user called (`unet(...)`, `vae.decode(z)`), whatever the method;
    only calls that name a tensor argument count.
    """
    found = None
    f = sys._getframe(depth)
    while f is not None:
        code = f.f_code
        if code.co_argcount and code.co_varnames[0] == "self":
            loc = f.f_locals
            owner = loc.get("self")
            if isinstance(owner, nn.Module) and code.co_name not in (
                "_call_impl",
                "_wrapped_call_impl",
                "inner",
            ):
                nargs = code.co_argcount + code.co_kwonlyargcount
                arguments = {n: loc.get(n) for n in code.co_varnames[1:nargs]}
                # wrappers taking (self, *args) name nothing: keep the outermost call that names a tensor
                if any(isinstance(v, torch.Tensor) for v in arguments.values()):
                    found = (owner, code.co_name, arguments)
        f = f.f_back
    return found


def _root_method_input(t: torch.Tensor) -> Origin | None:
    """An untagged tensor passed to the entry method of a module (e.g. `vae.decode(z)`)."""
    entry = entry_call(3)
    if entry is None:
        return None
    owner, method, arguments = entry
    for name, value in arguments.items():
        if value is t:
            return Origin(
                kind="input", name=name, op=f"{type(owner).__name__}.{method}", dtype=canonical(t.dtype)
            )
    return None


def _variable_name(t: torch.Tensor | None) -> str | None:
    """The name of a local variable in user or library code (not torch) that holds `t`."""
    if t is None:
        return None
    f = sys._getframe(2)
    for _ in range(64):
        if f is None:
            return None
        if frame_kind(f.f_code) != SKIP:
            for name, value in f.f_locals.items():
                if value is t and name != "self":
                    return name
        f = f.f_back
    return None


def origin_of(t: torch.Tensor, names: Names, prov: Provenance) -> Origin:
    known = names.tensor(t)
    if known is not None:
        kind, qual, owner = known
        return Origin(kind=kind, name=qual, module=names.module(owner), dtype=canonical(t.dtype))
    tag = prov.lookup(t)
    if tag is not None:
        return tag_to_origin(tag, names.module)
    found = _root_method_input(t)
    if found is not None:
        return found
    return Origin(kind="unknown", name="untracked (created before watch() started)", dtype=canonical(t.dtype))


def _library(module: nn.Module | None) -> str | None:
    if module is None:
        return None
    top = type(module).__module__.split(".")[0]
    return top if top in ("diffusers", "transformers", "peft", "timm", "accelerate") else None


def build(
    code: str,
    op: str,
    operands: list[Seen],
    expected: torch.dtype | None,
    names: Names,
    prov: Provenance,
    module: nn.Module | None,
    root: nn.Module | None,
    *,
    context: set[str] | None = None,
    message: str = "",
    depth: int = 3,
    data: dict[str, Any] | None = None,
    severity: str | None = None,
) -> Finding:
    """A Finding for a mismatch at `op` in `module`, with origins and concrete fixes."""
    inner, user = caller_frames(depth)
    file, line, function = where(inner)
    ufile, uline, _ = where(user)
    path = names.module(module)
    ops: list[Operand] = []
    odd = None
    odd_tensor = None
    param_name = None
    for s in operands:
        origin = s.origin or origin_of(s.tensor, names, prov)
        name = origin.name if origin.kind in ("parameter", "buffer", "input") else None
        if origin.kind == "parameter" and param_name is None:
            param_name = origin.name
        ops.append(
            Operand(
                role=s.role,
                dtype=canonical(s.tensor.dtype),
                shape=list(s.tensor.shape),
                name=name,
                origin=origin,
            )
        )
        if s.odd and odd is None:
            odd, odd_tensor = ops[-1], s.tensor
    ctx = set(context or ())
    lib = _library(root) or _library(module)
    if lib:
        ctx.add(lib)
    if odd is not None and odd.origin is not None:
        ctx.add(f"odd-{odd.origin.kind}")
    ctx |= situation(ops, module, root)
    variable = _variable_name(odd_tensor) if odd else None  # the user's own name for it, if any
    made = odd.origin.name if odd and odd.origin and odd.origin.kind in ("op", "cast", "output") else None
    odd_name = (odd.name or variable or made or odd.role) if odd else None
    odd_file = odd.origin.file if odd and odd.origin and odd.origin.file else (ufile or file)
    odd_line = odd.origin.line if odd and odd.origin and odd.origin.file else (uline or line)
    fix_names = {
        "module": path or "<root>",
        "module_class": type(module).__name__ if module is not None else None,
        "component": type(root).__name__ if root is not None else None,
        "op": op,
        "param": param_name,
        "input": odd_name,
        "tensor": next((n for n in (variable, odd_name) if n and n.isidentifier()), "x"),
        "dtype": torch_name(expected),
        "other_dtype": torch_name(odd and getattr(torch, odd.dtype or "", None)),
        "file": odd_file,
        "line": odd_line,
        "device": operands[0].tensor.device.type if operands else "cuda",  # autocast's device_type
        "made_op": odd.origin.op if odd and odd.origin and odd.origin.kind == "op" else None,
    }
    if not message:
        parts = ", ".join(f"{o.role} {o.dtype}" for o in ops)
        need = f"; it needs {canonical(expected)}" if expected is not None else ""
        place = f" in '{path or '<root>'}'" if module is not None else ""
        message = f"{op}{place}: {parts}{need}"
    extra: dict[str, Any] = {"expected_dtype": canonical(expected)} if expected is not None else {}
    if ufile and (ufile, uline) != (file, line):
        extra["your_code"] = f"{ufile}:{uline}"
    extra.update(data or {})
    fields: dict[str, Any] = {}
    if severity:
        from ..report import Severity

        fields["severity"] = Severity(severity)
    extra["context"] = sorted(ctx)
    finding = catalog.finding(
        code,
        context=ctx,
        names=fix_names,
        message=message,
        location=Location(
            module=path, module_type=type(module).__name__ if module is not None else None, op=op,
            file=file, line=line, function=function,
        ),
        operands=ops,
        data=extra,
        **fields,
    )  # fmt: skip
    finding.fix_names = fix_names  # type: ignore[attr-defined]  # kept off the JSON: for re-ranking
    return finding


def situation(ops: list[Operand], module: nn.Module | None, root: nn.Module | None) -> set[str]:
    """Context tags the catalog ranks fixes by: input-fp32/input-low, inference/training, vae, distributed."""
    tags = set()
    inp = next((o for o in ops if o.role == "input"), None)
    if inp is not None and inp.dtype == "float32":
        tags.add("input-fp32")
    elif inp is not None and inp.dtype in ("float16", "bfloat16"):
        tags.add("input-low")
    if any(o.dtype == "float64" for o in ops):
        tags.add("fp64")
    if inp is not None and inp.dtype and not inp.dtype.startswith(("float", "bfloat")):
        tags.add("input-int")  # autocast never casts integers: its fix would not help
    training = torch.is_grad_enabled() and (module.training if module is not None else True)
    tags.add("training" if training else "inference")
    name = type(root).__name__ if root is not None else ""
    if "Autoencoder" in name or "VAE" in name.upper():
        tags.add("vae")
    if "RANK" in os.environ or (torch.distributed.is_available() and torch.distributed.is_initialized()):
        tags.add("distributed")
    return tags


def _chain(origin: Origin, depth: int = 0, limit: int = 6) -> list[tuple[int, Origin]]:
    """The ancestors of an origin, depth-first, as (depth, origin) pairs."""
    out: list[tuple[int, Origin]] = []
    for c in origin.chain:
        if len(out) >= limit:
            break
        out.append((depth, c))
        out.extend(_chain(c, depth + 1, limit - len(out)))
    return out[:limit]


def note_text(finding: Finding) -> str:
    """The diagnosis as an exception note: a few plain lines, no colour."""
    lines = [f"dtype-doctor [{finding.code}] {finding.title}"]
    if finding.message:
        lines.append(f"  {finding.message}")
    if finding.location:
        lines.append(f"  at {finding.location.describe()}")
    if finding.data.get("your_code"):
        lines.append(f"  your code: {finding.data['your_code']}")
    for o in finding.operands:
        shape = "x".join(map(str, o.shape)) if o.shape is not None else ""
        origin = o.origin.describe() if o.origin else ""
        lines.append(f"  {o.role:<8} {o.dtype or '?':<9} {shape:<14} <- {origin}")
        if o.origin:
            lines.extend(f"  {'':<34}{'  ' * depth}<- {c.describe()}" for depth, c in _chain(o.origin))
    for fix in finding.fixes[:2]:
        lines.append(f"  fix: {fix.title}")
        if fix.snippet:
            lines.extend(f"       {s}" for s in fix.snippet.splitlines()[:3])
    return "\n".join(lines)
