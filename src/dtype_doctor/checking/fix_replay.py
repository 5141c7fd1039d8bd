"""check's fixes, in the user's names, handed to the verifier's dry-run back-end.

The fixes are written in the user's names: the variable the factory returns (pasted in the factory,
before its `return`), or `model` where the factory is called (`model = build()`), plus the fixes only
check can give (a module island converted, an input passed in the model's dtype). The verifier's
dry-run back-end (verifying/backends/dry_run.py) replays them on the meta mirror and labels them.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from contextvars import ContextVar
from typing import Any

import torch
from torch import nn

from .. import remedies
from ..catalog.family_codes import CHECK_INCOMPLETE
from ..report import Finding, Fix, Report, Severity
from ..verifying.contract import RANK
from ..watching import blame
from ..watching.names import loaded_names
from ..watching.provenance import short_path
from ..watching.snippets import renamed
from . import dry_replay
from .dry_replay import DryRun

# the factory a module given to check was built by (the CLI builds it first): fixes use its names
made_by: ContextVar[Any] = ContextVar("made_by", default=None)


def user_name(factory: Any) -> tuple[str, str, dict[str, Any]]:
    """(the model's variable, where a fix is pasted, the globals there) for a factory or a module."""
    fn = factory if inspect.isfunction(factory) else None
    scope = dict(getattr(fn, "__globals__", {}) or {})
    if fn is None:
        return "model", "", scope
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        tree = None
    top = tree.body[0] if tree is not None and tree.body else None
    returned = {ast.unparse(n.value) for n in _own_returns(top)} if top is not None else set()
    if len(returned) == 1 and (name := returned.pop()).isidentifier() and name not in ("torch", "nn", "F"):
        return name, f"in {fn.__name__}(), before `return {name}`", scope
    return "model", f"where you call it: `model = {fn.__name__}()`", scope


def _own_returns(fn: ast.AST) -> list[ast.Return]:
    """The return statements of `fn` itself, not of functions or classes defined inside it."""
    out: list[ast.Return] = []
    todo = list(ast.iter_child_nodes(fn))
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, ast.Return) and node.value is not None:
            out.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return out


def island_fixes(finding: Finding, mirror: nn.Module, name: str, factory: Any) -> list[Fix]:
    """Convert the odd module(s) when the module, not the activation, is the odd one out."""
    path = finding.location.module if finding.location is not None else None
    if path is None:
        return []
    try:
        module = mirror.get_submodule(path)
    except AttributeError:
        return []
    params = {o.dtype for o in finding.operands if o.origin is not None and o.origin.kind == "parameter"}
    data = [o.dtype for o in finding.operands if o.origin is not None and o.origin.kind != "parameter"]
    activation = next((getattr(torch, d, None) for d in data if d and d not in params), None)
    own = {p.dtype for p in module.parameters(recurse=False) if p.is_floating_point()}
    if activation is None or len(own) != 1:
        return []
    have = own.pop()
    if have == activation or blame.majority([mirror]) != activation:
        return []
    paths = blame.islands(mirror, have)
    if not paths or paths == [""]:
        return []
    island = blame.Island(model=name, paths=paths, dtype=have, want=activation)
    file = inspect.getsourcefile(factory) if inspect.isfunction(factory) else None
    target = paths[0].rpartition(".")[2]
    hit = blame._assignment(file, target) if file else None
    if hit is not None:
        island.built = (short_path(file or ""), hit[0], hit[1])
    fixes = [island.fix()]
    made = island.build_fix()
    if made is not None:
        made.why += f" (this line replaces {island.built[0]}:{island.built[1]})" if island.built else ""
        made.dd_replaces = True  # type: ignore[attr-defined]  # pasted over that line, not before return
        fixes.append(made)
    return fixes


def _with_import(fix: Fix, scope: dict[str, Any]) -> Fix:
    """`import torch` first when the snippet needs torch and the factory's file does not import it."""
    needs = "torch" in (loaded_names(fix.snippet) or set())
    if not needs or "torch" in scope or fix.snippet.startswith("import torch"):
        return fix
    return remedies.revise(fix, snippet="import torch\n" + fix.snippet)


def input_fixes(
    finding: Finding, kw: dict, flags: dict[str, str] | None, names: dict[Any, str] | None = None
) -> list[Fix]:
    """An input given in another dtype than the model needs: the same --input flag in that dtype,
    or (check called from Python) the user's variable cast before it is passed.

    kw: the inputs, positional ones under their index; names: the user's variable for each (the
    caller's local holding that tensor), where one does."""
    want = getattr(torch, str(finding.data.get("expected_dtype") or ""), None)
    if not isinstance(want, torch.dtype):
        return []
    if not flags:
        return [
            _cast_input(key, var, want)
            for key, var in (names or {}).items()
            if _other_float(kw.get(key), want)
        ]
    out = []
    for key, flag in (flags or {}).items():
        value, text = kw.get(key), flag.removeprefix("--input ")
        if not (flag.startswith("--input ") and _other_float(value, want)) or "=" not in text:
            continue
        shape, dtype = text.split("=", 1)[1].split(":")[0], str(want)[6:]
        out.append(
            _input_fix(
                key,
                want,
                title=f"Pass `{key}` in {dtype}, the model's dtype (in your code: the tensor you pass as {key}=)",
                snippet=f"--input {key}={shape}:{dtype}",
                why=f"the model runs in {dtype}; {key} arrives in {str(value.dtype)[6:]}",
                language="shell",
            )
        )
    return out


def _other_float(value: Any, want: torch.dtype) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != want


def _cast_input(key: Any, var: str, want: torch.dtype) -> Fix:
    dtype = str(want)[6:]
    passed = f"as {key}=" if isinstance(key, str) else f"as input {key}"
    return _input_fix(
        key,
        want,
        title=f"Cast `{var}` to {dtype}, the model's dtype, before you pass it ({passed})",
        snippet=f"{var} = {var}.to(torch.{dtype})",
        why=f"the model runs in {dtype}; `{var}` arrives in another dtype and every layer it reaches mixes the two",
        language="python",
    )


def _input_fix(key: Any, want: torch.dtype, **fields: str) -> Fix:
    """A fix that is the input `key` passed in `want`: replayed as the dry run with that input cast."""
    fix = remedies.literal(**fields)
    fix.dd_input = (key, want)  # type: ignore[attr-defined]
    return fix


def verify_top(
    report: Report,
    mirror: nn.Module,
    factory: Any,
    dry_run: DryRun,
    kw: dict | None = None,
    flags: dict[str, str] | None = None,
    dry_run_s: float = 0.0,
    names: dict[Any, str] | None = None,
) -> None:
    """Write the first error finding's fixes in the user's names, try them, put the passing ones first.

    The mirror is given away to the verifier's dry-run back-end (verifying/backends/dry_run.py:
    which fixes it replays, within what time)."""
    first = next(
        (f for f in report.findings if f.severity == Severity.ERROR and f.code != CHECK_INCOMPLETE), None
    )
    if first is None:
        return
    if isinstance(factory, nn.Module) and made_by.get() is not None:
        factory = made_by.get()
    name, where, scope = user_name(factory)
    kw = kw or {}
    island = island_fixes(first, mirror, name, factory)
    fixes = [*island, *([] if island else input_fixes(first, kw, flags, names)), *first.fixes]
    # in the factory's names (an input fix is in the caller's own already)
    in_factory = [f.language == "python" and not hasattr(f, "dd_input") for f in fixes]
    fixes = [renamed(f, name) if there else f for f, there in zip(fixes, in_factory, strict=True)]
    fixes = [_with_import(f, scope) if there else f for f, there in zip(fixes, in_factory, strict=True)]
    seen: set[str] = set()
    fixes = [f for f in fixes if not (f.snippet and f.snippet in seen) and not seen.add(f.snippet)]
    dry_replay.label(fixes, dry_replay.Meta(mirror, name, scope, dry_run, kw), where, dry_run_s)
    named = [f for f in fixes if not f.verification.startswith("not verified (names ")]
    fixes = named or fixes  # a snippet naming what the factory does not have goes, unless it is all
    first.fixes = sorted(fixes, key=lambda x: RANK[x.verified])
