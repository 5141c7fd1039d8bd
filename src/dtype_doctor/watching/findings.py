"""Turning what the watcher saw (operands, module, frames) into catalog Findings and notes."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import torch
from torch import nn

from .. import catalog, causes, remedies
from ..catalog.libraries import MODEL_LIBRARIES
from ..dtypes import canonical
from ..report import Finding, Location, Operand, Origin, Severity
from ..signatures import argument_names
from . import (
    attributes,
    autocast_region,
    births,
    blame,
    intent,
    partly,
    peer_dtype,
    shared_reads,
    site_fixes,
    snippets,
    user_places,
)
from .modules import Names
from .names import (
    call_argument,
    call_source,
    expression_for,
    float64_array,
    stack_facts,
    tensor_name,
    user_frames,
    visible,
)
from .notes import note_text  # noqa: F401  (the finding as an exception note: failures, session)
from .provenance import Provenance, caller_frames, code_span, short_path, tag_to_origin, where


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


def origin_of(t: torch.Tensor, names: Names, prov: Provenance) -> Origin:
    known = names.tensor(t)
    tag = prov.lookup(t)
    if known is not None:
        if isinstance(tag, births.BirthTag) and tag.dtype == t.dtype:  # where it was made or converted
            return tag_to_origin(tag, names.module)
        kind, qual, owner = known
        return Origin(kind=kind, name=qual, module=names.module(owner), dtype=canonical(t.dtype))
    if tag is not None:
        return tag_to_origin(tag, names.module)
    found = _root_method_input(t)
    if found is not None:
        return found
    return Origin(kind="unknown", name="untracked (created before watch() started)", dtype=canonical(t.dtype))


def library_of(module: nn.Module | None) -> str | None:
    if module is None:
        return None
    top = type(module).__module__.split(".")[0]
    return top if top in MODEL_LIBRARIES else None


@dataclass
class FixContext:
    """What re-ranking and replaying a watched finding's fixes need: kept by the session beside the
    finding while it runs (`Session.fix_contexts`), never in the report or its JSON."""

    names: dict[str, Any]  # the names the catalog's fix templates use ({module}, {dtype}, ...)
    scope: FrameType | None = None  # the user's frame the fixes are pasted in
    inner: dict[str, str] = field(default_factory=dict)  # the user's locals inside the call: name -> where
    spans: list[tuple[str, int, int, str]] = field(default_factory=list)  # the user's functions inside it
    files: dict[str, str] = field(default_factory=dict)  # the user's files as reports show them -> path
    root: nn.Module | None = None  # the model the failing call entered
    root_expr: str | None = None  # the user's expression for it (`pipe.unet`)
    call_src: str | None = None  # the source of the user's call of it
    device: str = "cpu"  # autocast's device_type for the snippets


@dataclass
class _Odd:
    """The operand the finding blames, and the names the user knows it by."""

    operand: Operand | None = None
    tensor: torch.Tensor | None = None
    param: str | None = None  # the first parameter among the operands


def build(
    code: str,
    op: str,
    operands: list[Seen],
    *,
    expected: torch.dtype | None,
    names: Names,
    prov: Provenance,
    module: nn.Module | None,
    root: nn.Module | None,
    context: set[str] | None = None,
    message: str = "",
    depth: int = 3,
    data: dict[str, Any] | None = None,
    severity: str | None = None,
) -> tuple[Finding, FixContext]:
    """A Finding for a mismatch at `op` in `module` (part of the model `root`), with origins and
    concrete fixes, and the context its fixes were made in (`depth`: frames up to the watched call)."""
    inner, user = caller_frames(depth)
    file, line, function = where(inner)
    ufile, uline, _ = where(user)
    path = names.module(module)
    frames = user_frames(2)
    want = _safe(lambda: blame.root_majority(root) if root is not None else None)
    place = f"'{path or '<root>'}'" if module is not None else op
    tensors = [s.tensor for s in operands]
    why = (
        _safe(lambda: intent.rule_evidence(tensors, names, expected, place, root, prov)) if expected else None
    )
    floats = [s for s in operands if s.tensor.is_floating_point()]
    # a rule asks for a wider dtype than the model's, and no parameter decides
    wider = expected is not None and want in blame.LOW_DTYPES and expected not in blame.LOW_DTYPES
    lowered = wider and want != expected and not any(names.tensor(s.tensor) for s in floats)
    unruled = expected is None and any(s.tensor.dtype != want for s in floats)  # raised, no contract
    beside = intent.float64_beside_state(expected, want, [s.tensor for s in floats], names)  # NumPy's
    moved = (lowered or unruled) and any(s.tensor.dtype == want for s in floats)
    if want is not None and (beside or moved):
        for s in floats:  # the models' dtype decides, not the first operand
            s.odd = s.tensor.dtype != want
        expected = want
        evidence = (lambda: intent.rule_evidence(tensors, names, want, place, root, prov)) if beside else None
        why = _safe(evidence or (lambda: intent.model_evidence(root, prov, want)))
    if expected is None and site_fixes.integer_store(operands, floats):  # floats into an int8 cache
        expected = floats[0].tensor.dtype
        why = f"the values written are {canonical(expected)}; an integer store cannot hold them"
        context = {*(context or ()), "integer-store"}
    asked = _safe(lambda: intent.intended([s.tensor for s in operands], prov, root))
    if asked is not None and asked != expected:  # the wide operands were only defaulted: they are odd
        for s in operands:
            s.odd = s.tensor.is_floating_point() and s.tensor.dtype != asked
        expected = asked
        why = _safe(lambda: intent.asked_evidence(tensors, prov, asked))
    if expected is None:  # no rule, no model's parameters: a float64 beside narrower floats intrudes
        narrower = _float64_intruded(floats)
        if narrower is not None:
            for s in floats:
                s.odd = s.tensor.dtype == torch.float64
            expected = narrower
            why = (
                f"the other operands are {canonical(narrower)}; float64 is NumPy's and Python floats' default"
            )
    ops, odd = _operands(operands, names, prov, root)
    blamed = odd.operand
    ctx = set(context or ())
    lib = library_of(root) or library_of(module)
    if lib:
        ctx.add(lib)
    if blamed is not None and blamed.origin is not None:
        ctx.add(f"odd-{blamed.origin.kind}")
    ctx |= situation(ops, module, root)
    rooted = _safe(lambda: expression_for(root, frames) if root is not None else None)
    variable = _safe(lambda: _user_name(blamed, odd.tensor, root, rooted, frames) if blamed else None)
    island = _safe(lambda: blame.decide(module, root, _activation(ops), frames))
    if island is None and odd.tensor is not None:  # the odd operand came out of a whole odd model
        island = _safe(lambda: blame.upstream(odd.tensor, prov, frames, expected))
    if island is not None:
        expected = island.want
        why = f"the models around it are {canonical(island.want)}; its {canonical(island.dtype)} module is the odd one"
        ctx.add("odd-module")
    origin = blamed.origin if blamed else None
    made = origin.name if origin and origin.kind in ("op", "cast", "output") else None
    in_user_code = bool(frames) and inner is not None and frames[0].f_code is inner[0]
    places = _safe(
        lambda: user_places.collect(
            tensor=odd.tensor,
            variable=variable,
            frames=frames,
            rooted=rooted,
            origin=causes.root_origin(origin, canonical(expected)) if origin is not None else None,
            op_frame=frames[0] if in_user_code else None,
        )
    )
    fix_names = {
        "module": path or "<root>",
        "module_class": type(module).__name__ if module is not None else None,
        "component": type(root).__name__ if root is not None else None,
        "op": op,
        "param": odd.param,
        "input": (variable or blamed.name or made or blamed.role) if blamed else None,
        "tensor": variable,
        "array": _safe(lambda: float64_array(rooted[1], root) if rooted else None),
        "model": rooted[0] if rooted else None,
        "dtype": torch_name(expected),
        "other_dtype": torch_name(blamed and getattr(torch, blamed.dtype or "", None)),
        "file": origin.file if origin and origin.file else (ufile or file),
        "line": origin.line if origin and origin.file else (uline or line),
        "device": operands[0].tensor.device.type if operands else "cpu",  # autocast's device_type
        "made_op": origin.op if origin and origin.kind == "op" else None,
        "dest": _safe(
            lambda: peer_dtype.holder_for(operands, op, frames[0] if in_user_code else None, odd.tensor)
        ),
        "places": places or None,
    }
    extra: dict[str, Any] = {"expected_dtype": canonical(expected)} if expected is not None else {}
    if ufile and (ufile, uline) != (file, line):
        extra["your_code"] = f"{ufile}:{uline}"
    extra["device"] = fix_names["device"]
    extra.update(_safe(lambda: stack_facts(frames, odd.tensor)) or {"user_stack": []})
    if expected is not None and why:
        extra["intended"] = {"dtype": canonical(expected), "evidence": why}
        upcast = _safe(lambda: intent.deliberate(odd.tensor, prov) if odd.tensor is not None else None)
        if upcast:
            extra["intended"]["deliberate"] = upcast
    extra.update(data or {})
    extra["context"] = sorted(ctx)
    finding = catalog.finding(
        code,
        context=ctx,
        names=fix_names,
        message=message or _message(op, ops, expected, path, module),
        location=Location(
            module=path, module_type=type(module).__name__ if module is not None else None, op=op,
            file=file, line=line, function=function,
        ),
        operands=ops,
        data=extra,
        **({"severity": Severity(severity)} if severity else {}),
    )  # fmt: skip
    fix_context = FixContext(fix_names, device=fix_names["device"])
    try:  # the names, the island and the static check: never at the cost of the finding
        _better_fixes(finding, island, blamed, expected, rooted, want, root, places)
        if island is None and root is not None and expected is not None:  # a partly converted model
            whole = partly.whole_model_fix(root, expected, frames, prov)
            if whole is not None:  # the group's one edit: no cast of a single tensor goes before it
                finding.fixes, finding.data["partly_converted"] = remedies.first(finding.fixes, whole), True
        scope = rooted[1] if rooted else (frames[-1] if frames else None)
        inside = frames[: frames.index(scope)] if scope in frames else []
        fix_context.scope, fix_context.root = scope, root
        fix_context.inner = {n: f"{f.f_code.co_name} ({f.f_code.co_filename.rsplit('/', 1)[-1]}:{f.f_lineno})"
                             for f in reversed(inside) for n in f.f_locals if n != "self"}  # fmt: skip
        fix_context.spans = [code_span(f) for f in inside]
        fix_context.files = {short_path(f.f_code.co_filename): f.f_code.co_filename for f in frames}
        fix_context.root_expr = rooted[0] if rooted else None
        fix_context.call_src = call_source(rooted[1], root) if rooted else None
        finding.fixes = refine(finding.fixes, fix_context)
        # pasted where the attribute is set, whose own names it reuses: not checked in the call's frame
        registered = attributes.buffer_fix(blamed.origin) if blamed and blamed.origin and not island else None
        finding.fixes = [registered, *finding.fixes] if registered else finding.fixes
        if blamed is not None and blamed.origin is not None and expected is not None and not island:
            held = causes.root_origin(blamed.origin, canonical(expected))  # a shared module's: at its read
            finding.fixes = remedies.first(finding.fixes, shared_reads.read_fix(held, root, frames, expected))
        if blamed is not None and not island:  # the seam of autocast's dtype; a dtype read off int8
            site_fixes.at_sites(finding, blamed, expected, frames[0] if in_user_code else None)
    except Exception:
        fix_context.scope = None
    return finding, fix_context


def _float64_intruded(floats: list[Seen]) -> torch.dtype | None:
    """The one narrower dtype of operands a float64 one meets (float32 beside a NumPy float64), else None."""
    dtypes = {s.tensor.dtype for s in floats}
    narrower = dtypes - {torch.float64}
    return narrower.pop() if torch.float64 in dtypes and len(narrower) == 1 else None


def _operands(
    operands: list[Seen], names: Names, prov: Provenance, root: nn.Module | None
) -> tuple[list[Operand], _Odd]:
    """The operands as the report shows them (with their origins), and the first odd one."""
    ops: list[Operand] = []
    odd = _Odd()
    for s in operands:
        origin = s.origin or origin_of(s.tensor, names, prov)
        if s.odd and origin.kind not in ("parameter", "buffer"):  # a plain attribute: born where set
            origin = _safe(lambda: attributes.attribute_origin(s.tensor, root, origin)) or origin  # noqa: B023
        if s.odd:
            _safe(lambda: _read_without_cast(s.tensor, prov, origin))  # noqa: B023
            _safe(lambda: autocast_region.attach(origin, user_frames(3)))  # noqa: B023
        name = origin.name if origin.kind in ("parameter", "buffer", "input") else None
        if origin.kind == "parameter" and odd.param is None:
            odd.param = origin.name
        ops.append(
            Operand(
                role=s.role,
                dtype=canonical(s.tensor.dtype),
                shape=list(s.tensor.shape),
                name=name,
                origin=origin,
            )
        )
        if s.odd and odd.operand is None:
            odd.operand, odd.tensor = ops[-1], s.tensor
    return ops, odd


def _read_without_cast(t: torch.Tensor, prov: Provenance, origin: Origin) -> None:
    """A tensor a module holds in a wider dtype on purpose (an fp32 table, an explicit `.float()`)
    is intent; the place to act is where forward reads it into the low computation without a cast:
    that read joins its chain."""
    tag = prov.lookup(t)
    if not isinstance(tag, births.BirthTag) or intent.deliberate(t, prov) is None:
        return
    owner, attribute = tag.held_as()
    if owner is None or not attribute:
        return
    read = attributes.first_read(type(owner), attribute)
    if read is not None:
        file, line, method = read
        origin.chain.append(
            Origin(kind="call", name=f"read without a cast in {method}", file=file, line=line)
        )


def _message(op: str, ops: list[Operand], expected: torch.dtype | None, path: str | None, module: Any) -> str:
    parts = ", ".join(f"{o.role} {o.dtype}" for o in ops)
    need = f"; it needs {canonical(expected)}" if expected is not None else ""
    place = f" in '{path or '<root>'}'" if module is not None else ""
    return f"{op}{place}: {parts}{need}"


def _better_fixes(
    finding: Finding,
    island: Any,
    odd: Operand | None,
    expected: torch.dtype | None,
    rooted: Any,
    want: torch.dtype | None,
    root: nn.Module | None,
    places: Any = None,
) -> None:
    """Put the fixes at the cause first: the odd module island's, the root origin's, the input's."""
    at_root = None
    if island is None and odd is not None and odd.origin is not None and expected is not None:
        at_root = causes.root_fix(causes.root_origin(odd.origin, canonical(expected)), canonical(expected))
        if at_root is not None and all(x.title != at_root.title for x in finding.fixes):
            finding.fixes = causes.with_root_fix(finding, at_root)
    if island is None and odd is not None and odd.origin is not None and expected is not None and rooted:
        call = f"{short_path(rooted[1].f_code.co_filename)}:{rooted[1].f_lineno}"
        held_odd = [o.origin for o in finding.operands if o.origin and o.dtype != canonical(expected)]
        held = births.held_fix(held_odd, root, rooted[0], expected, call) if root is not None else None
        if held is not None:  # after the edit at the birth, when there is one: that is the root
            born = finding.fixes[:1] if at_root is not None and finding.fixes[:1] == [at_root] else []
            finding.fixes = [*born, held, *finding.fixes[len(born) :]]
    if island is None and rooted is not None and want is not None and root is not None:
        passed = blame.input_fix(rooted[1], root, rooted[0], want)
        if passed is not None:
            finding.fixes = [passed, *(x for x in finding.fixes if x.snippet != passed.snippet)]
    if island is not None:
        pair = (island.fix(places), island.build_fix())
        if island.upstream and island.built:  # it fed the op: made right where it is made, first
            pair = pair[::-1]
        extra_fixes = [x for x in pair if x is not None]
        finding.fixes = [*extra_fixes, *finding.fixes]
        finding.data["island"] = {
            "model": island.model,
            "modules": island.paths[:20],
            "count": len(island.paths),
            "dtype": canonical(island.dtype),
            "want": canonical(island.want),
            "label": island.label,
            **({"built": f"{island.built[0]}:{island.built[1]}"} if island.built else {}),
        }
        finding.data["expected_dtype"] = canonical(island.want)


def _safe(fn: Any) -> Any:
    """fn() or None: the user's frames and models are read best-effort."""
    try:
        return fn()
    except Exception:
        return None


def refine(fixes: list, fix_context: FixContext) -> list:
    """The catalog's fixes made pasteable: the user's name for the model, then the static check."""
    scope, expr = fix_context.scope, fix_context.root_expr
    if scope is not None and expr and "model" not in scope.f_locals and "model" not in scope.f_globals:
        fixes = [snippets.renamed(x, expr) for x in fixes]
    return accept(fixes, fix_context.device, scope, set(fix_context.inner))


def accept(fixes: list, device: str, scope: Any, inner: set[str] | None = None) -> list:
    """The fixes that pass the static check in the user's frame `scope`, or in one of the user's
    frames inside the call it made (`inner`: their names) (snippets.refusal)."""
    if scope is None:
        return snippets.keep_acceptable(fixes, device, None)
    env = {**scope.f_globals, **scope.f_locals}
    return snippets.keep_acceptable(fixes, device, visible(scope) | (inner or set()), env)


def _activation(ops: list[Operand]) -> torch.dtype | None:
    """The dtype of the data operand that disagrees with the module's parameters, if one does (the
    `input` of a module op is data even when its dtype came from a parameter: an embedding's output)."""
    data = [
        o
        for o in ops
        if o.origin is not None and (o.role == "input" or o.origin.kind not in ("parameter", "buffer"))
    ]
    params = {o.dtype for o in ops if o.origin is not None and o.origin.kind == "parameter" and o not in data}
    for o in data:
        if o.dtype not in params:
            return getattr(torch, o.dtype or "", None)
    return None


def _user_name(
    odd: Operand, t: torch.Tensor | None, root: nn.Module | None, rooted: Any, frames: list
) -> str | None:
    """The user's name for the odd tensor: a local of their frame, or the argument they passed."""
    if t is not None:
        name = tensor_name(t, frames)
        if name is not None:
            return name
    origin = odd.origin
    if origin is not None and origin.kind == "input" and root is not None and rooted is not None:
        params = argument_names(root) or []
        pos = params.index(origin.name) if origin.name in params else None
        return call_argument(rooted[1], root, origin.name, pos)
    return None


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
