"""A plain tensor attribute of a module (`self.table = make_table()`, not a buffer): module-wide
`.to()/.half()/.float()` never converts it, so it keeps its birth dtype while the model around it
changes. Its birth is the assignment in the module's class, found when a finding reads it."""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Iterator

import torch
from torch import nn

from .. import remedies
from ..catalog.shared_remedies import REGISTER_BUFFER
from ..report import Fix, Origin
from .provenance import short_path

_MAX_MODULES = 4096


def owner_of(t: torch.Tensor, root: nn.Module | None) -> tuple[str, nn.Module, str] | None:
    """(module path, module, attribute name) of the module under `root` holding `t` (or its base) as a
    plain attribute; None when no module does."""
    if root is None:
        return None
    targets = {id(t)} | ({id(t._base)} if t._base is not None else set())
    for n, (path, module) in enumerate(root.named_modules()):
        if n > _MAX_MODULES:
            return None
        for name, value in vars(module).items():
            if isinstance(value, torch.Tensor) and id(value) in targets and not name.startswith("_"):
                return path, module, name
    return None


def _class_sources(cls: type) -> Iterator[tuple[ast.Module, int, str]]:
    """(parsed source, first line, file) of the class and its bases in order, up to nn.Module."""
    for klass in cls.__mro__:
        if klass in (nn.Module, object):
            break
        try:
            lines, start = inspect.getsourcelines(klass)
            tree = ast.parse(textwrap.dedent("".join(lines)))
            path = inspect.getsourcefile(klass) or ""
        except (OSError, TypeError, SyntaxError):
            continue
        yield tree, start, path


def _assignment(cls: type, name: str) -> tuple[str, int, str] | None:
    """(file, line, source of the assigned value) of `self.<name> = …` or `setattr(self, "<name>", …)`
    in the class (its bases in order)."""
    for tree, start, path in _class_sources(cls):
        for node in ast.walk(tree):
            value = _assigned(node, name)
            if value is not None:
                return path, start + node.lineno - 1, ast.unparse(value)
    return None


def _assigned(node: ast.AST, name: str) -> ast.expr | None:
    if isinstance(node, ast.Assign):
        for target in node.targets:
            if (
                isinstance(target, ast.Attribute)
                and target.attr == name
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
            ):
                return node.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
        args = node.args
        if (
            len(args) == 3
            and isinstance(args[0], ast.Name)
            and args[0].id == "self"
            and isinstance(args[1], ast.Constant)
            and args[1].value == name
        ):
            return args[2]
    return None


def attribute_origin(t: torch.Tensor, root: nn.Module | None, made: Origin | None) -> Origin | None:
    """The birth of a plain tensor attribute: where the module's class assigns it, with what made
    the tensor (`made`) as parent; None when `t` is no module's plain attribute."""
    owned = owner_of(t, root)
    if owned is None:
        return None
    path, module, name = owned
    found = _assignment(type(module), name)
    if found is None:
        return None
    file, line, value = found
    origin = Origin(
        kind="attribute",
        name=".".join(p for p in (path, name) if p),
        op=value,
        module=path or None,
        file=short_path(file),
        line=line,
        dtype=str(t.dtype).removeprefix("torch."),
    )
    if made is not None:
        origin.chain.append(made)
    return origin


def buffer_fix(origin: Origin) -> Fix | None:
    """Register the attribute as a (non-persistent) buffer where it is set: module-wide casts and
    `.to(device)` then convert it with the model."""
    if origin.kind != "attribute" or not origin.name:
        return None
    name = origin.name.rsplit(".", 1)[-1]
    return remedies.make(REGISTER_BUFFER, file=origin.file, line=origin.line, name=name, value=origin.op)


def first_read(cls: type, name: str) -> tuple[str, int, str] | None:
    """(file, line, method) where the class's methods other than `__init__` first read `self.<name>`
    (`forward` first): where a held tensor enters the computation."""
    found: list[tuple[int, int, str, str]] = []
    for tree, start, path in _class_sources(cls):
        for method in tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []:
            if not isinstance(method, ast.FunctionDef) or method.name == "__init__":
                continue
            for node in ast.walk(method):
                if (
                    isinstance(node, ast.Attribute)
                    and node.attr == name
                    and isinstance(node.ctx, ast.Load)
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "self"
                ):
                    line = start + node.lineno - 1
                    found.append((method.name != "forward", line, path, method.name))
        if found:
            break
    if not found:
        return None
    _, line, path, method = min(found)
    return short_path(path), line, f"{cls.__name__}.{method}"
