"""A module shared by a second model: where it was handed over, when it holds another dtype.

A memoised factory (`get_rope(head_size, base)` caching rotary modules in a dict) returns the module
built for the first model to every later one; when the key leaves out the dtype, a bf16 model gets
the fp16 module's tables and fails far from the factory. torch's module registration hook sees the
module attached to its second parent; the lines it came through (the attaching statement, the
factory's `return CACHE[key]`, the line that made `key`) join its tensors' lineage (`births.py`).
"""

from __future__ import annotations

import ast
import weakref
from typing import Any

import torch
from torch import nn

from ..numerics.opsource import source_tree
from .dtype_values import Site, parse_line, user_frame
from .value_births import assigned_at

_attached: weakref.WeakKeyDictionary[nn.Module, Any] = weakref.WeakKeyDictionary()  # its first parent


def _returned_lookup(func: Any) -> list[Site]:
    """`return CACHE[key]` in `func`: the return line, and where `key` was assigned."""
    code = getattr(func, "__code__", None)
    tree = source_tree(code.co_filename) if code is not None else None
    if tree is None:
        return []
    body = next(
        (
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.FunctionDef)
            and n.name == code.co_name
            and n.lineno <= code.co_firstlineno <= (n.body[0].lineno if n.body else n.lineno)
        ),
        None,
    )
    for node in ast.walk(body) if body is not None else ():
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Subscript):
            key = node.value.slice
            here = Site(code.co_filename, node.lineno, ast.unparse(node), ast.unparse(node.value))
            found = assigned_at(code.co_filename, node.lineno, key.id) if isinstance(key, ast.Name) else None
            if found is None:
                return [here]
            missing = "" if "dtype" in found[1] else ", which holds no dtype"
            return [here, Site(code.co_filename, found[0], found[1], f"cache key `{key.id}`{missing}")]
    return []


def record_child(parent: nn.Module, child: nn.Module) -> list[torch.Tensor]:
    """`self.<name> = <a module>`: a module attached to a second parent is shared; when it holds
    a dtype other than the one models are built in now (a rotary table memoised for a model of
    another dtype), the lines it was handed over through are kept (`shared_sites`) and its tensors
    in that other dtype returned, for their lineage."""
    first = _attached.get(child)
    if first is None:
        _attached[child] = weakref.ref(parent)
        return []
    if first() is parent:  # set again on the same parent (a dead one's module is reused)
        return []
    _others.setdefault(child, []).append(weakref.ref(parent))
    frame = user_frame()
    if frame is None:
        return []
    now = torch.get_default_dtype()
    held = [t for t in (*child.parameters(), *child.buffers()) if t.is_floating_point() and t.dtype != now]
    tree = parse_line(frame.f_code.co_filename, frame.f_lineno)
    stmt = tree.body[0] if isinstance(tree, ast.Module) and tree.body else None
    value = getattr(stmt, "value", None)
    sites = (
        [
            Site(
                frame.f_code.co_filename,
                frame.f_lineno,
                ast.unparse(stmt),
                "module shared with another model",
            )
        ]
        if stmt
        else []
    )
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
        func = frame.f_locals.get(value.func.id, frame.f_globals.get(value.func.id))
        sites += _returned_lookup(func)
    _shared[child] = tuple(sites)
    return held if sites else []


_shared: weakref.WeakKeyDictionary[nn.Module, tuple[Site, ...]] = weakref.WeakKeyDictionary()
_others: weakref.WeakKeyDictionary[nn.Module, list[Any]] = weakref.WeakKeyDictionary()  # later parents


def shared_outside(module: Any, model: nn.Module) -> bool:
    """`module` is shared (record_child) and one of its parents is not part of `model`: another model
    holds it too (a module reused inside one model, a tied block, is not)."""
    try:
        refs = [_attached.get(module), *_others.get(module, ())] if module in _shared else []
    except TypeError:
        return False
    inside = {id(m) for m in model.modules()} if refs else set()
    return any(ref is not None and ref() is not None and id(ref()) not in inside for ref in refs)


def shared_sites(module: Any) -> tuple[Site, ...]:
    """The lines a module shared between models was handed over through (record_child)."""
    try:
        return _shared.get(module, ())
    except TypeError:
        return ()
