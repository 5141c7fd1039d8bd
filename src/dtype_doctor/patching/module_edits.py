"""Edits for a module island: a module of another dtype than the rest of the model converted where
it is built, else before the user's call of the model (the planner's, patching/plan.py). No torch
import.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..editing import finders as find
from ..editing.source import Source, add_kwarg, call_name, cast_expr
from ..report import Finding, Operand
from .candidates import Candidate

if TYPE_CHECKING:
    from .plan import Planner

# torch.nn classes that hold modules and take no dtype= (a layer such as nn.Linear takes it)
_CONTAINERS = frozenset(
    {"Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict", "Module", "Identity"}
)


def convert_module(planner: Planner, f: Finding, operand: Operand, dtype: str) -> Iterator[Candidate]:
    """A module of another dtype than the model (an island): converted where it is built (`dtype=`
    for a torch.nn layer, else `.to()`), else before the user's call of the model."""
    origin = operand.origin
    path = _module_path(origin.module if origin else None, origin.name if origin else operand.name)
    site = planner.model_input_site(f) or planner.call_site(f)
    home = planner.source(planner.home)
    if site is None and home is not None:
        site = (home, len(home.lines) + 1)  # the factory's file: its last assignment of the module
    if site is None:
        return
    src, line = site
    call = find.model_call(src, line)
    callee = call_name(call.func) if call is not None else ""
    if path:
        for asg_src, value in _module_assignments(path.split(".")[0], src, line):
            if _per_call(asg_src, value.lineno):
                continue  # a module built in forward: converting it there costs every call
            where = f"{asg_src.path}:{value.lineno}"
            name = path.split(".")[0]
            built = call_name(value.func) if isinstance(value, ast.Call) else ""
            layer = built.startswith(("nn.", "torch.nn.")) and built.rsplit(".", 1)[-1] not in _CONTAINERS
            edit = add_kwarg(asg_src, value, "dtype", f"torch.{dtype}") if layer else None
            if edit is not None:
                yield Candidate(f"build `{name}` in {dtype} with dtype= ({where})", [edit])
            if not find.already_cast(value, dtype):
                title = f"convert `{name}` to {dtype} where it is built ({where})"
                yield Candidate(title, [cast_expr(asg_src, value, dtype)])
    if not callee or _per_call(src, line):
        return  # a module cast inside a method (forward) would run on every call
    where = f"{src.path}:{line}"
    if path:
        parts = path.split(".")
        if all(p.isidentifier() or p.isdigit() for p in parts):
            sub = callee + "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in parts)
        else:
            sub = f'{callee}.get_submodule("{path}")'

        yield Candidate(
            f"convert `{sub}` to {dtype} before the call ({where})",
            [find.insert_before(src, line, f"{sub}.to(torch.{dtype})")],
        )
    yield Candidate(
        f"convert `{callee}` to {dtype} before the call ({where})",
        [find.insert_before(src, line, f"{callee}.to(torch.{dtype})")],
    )


def _module_assignments(attr: str, src: Source, line: int) -> Iterator[tuple[Source, ast.expr]]:
    """`X.attr = VALUE` / `attr = VALUE`, the last one before `line` in the call's file, when its
    value is a call (a module taken from elsewhere, `X.attr = heads[k]`, is not built there)."""
    best: ast.Assign | None = None
    for node in src.nodes(ast.Assign):
        if node.lineno >= line:
            continue
        for target in node.targets:
            name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", None)
            if name == attr and (best is None or node.lineno > best.lineno):
                best = node
    if best is not None and isinstance(best.value, ast.Call):
        yield src, best.value


def _per_call(src: Source, line: int) -> bool:
    """`line` may run on each call of a model: it is in a method (first parameter `self`) other than
    `__init__`, or in a function nested in another (a wrapper, a closure)."""
    fn = find.enclosing_function(src, line)
    if fn is None:
        return False
    args = fn.args.args
    if args and args[0].arg == "self" and fn.name != "__init__":
        return True
    return find.enclosing_function(src, fn.lineno, outside=fn) is not None


def _module_path(module: str | None, param: str | None) -> str:
    """The module's path under the called model: `LlamaModel.layers.0.q_proj` → `layers.0.q_proj` (a
    leading class name is no attribute); from a parameter's name when the module is not known."""
    path = module if module is not None else (param or "").rpartition(".")[0]
    parts = [p for p in path.split(".") if p]
    if parts and parts[0][:1].isupper():
        parts = parts[1:]
    return ".".join(parts)
