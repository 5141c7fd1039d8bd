"""Tensors inside arbitrary values: walk (with paths), iterate, map (rebuilding the containers), cast.

One definition of "the tensors in a value", shared by check, compare, fix/guard/keep, numerics and
watch (its fix verification, the tags of a model's outputs).
Containers: tensors, lists, tuples, namedtuples, mappings (dicts, BatchEncoding), dataclasses, and
library outputs that are both (transformers ModelOutput, diffusers BaseOutput).
Only torch-side modules import this one: it imports torch.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import torch
from torch import nn

__all__ = [
    "cast_floats",
    "float_tensors",
    "has_nonfinite",
    "is_compute_float",
    "isolate_state",
    "iter_tensors",
    "map_tensors",
    "module_tensors",
    "own_paths_collide",
    "walk",
]


def _children(obj: Any) -> Iterable[tuple[str | int, Any]] | None:
    """(key or index, value) of a container, None for a leaf. Mappings come before dataclasses,
    so a ModelOutput yields its set entries (not its None fields)."""
    if isinstance(obj, Mapping):
        return obj.items()
    if isinstance(obj, (list, tuple)):
        return enumerate(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return ((f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj))
    return None


def walk(
    obj: Any, path: str = "", max_depth: int | None = None, max_items: int | None = None
) -> Iterator[tuple[str, torch.Tensor]]:
    """(path, tensor) for every tensor in a nested value, in a stable order: `logits`,
    `hidden_states[0]`, `output` for a bare tensor. `max_depth` containers deep at most, and the
    first `max_items` entries of each container at most."""
    for sub, t in _walk(obj, path, max_depth, max_items):
        yield sub or "output", t


def iter_tensors(
    obj: Any, max_depth: int | None = None, max_items: int | None = None
) -> Iterator[torch.Tensor]:
    """Every tensor in a nested value, in `walk`'s order, without building paths (hot paths:
    module hooks, every op under check)."""
    if isinstance(obj, torch.Tensor):
        return iter((obj,))
    return _iter(obj, max_depth, max_items)


LEAVES = frozenset({int, float, bool, str, bytes, type(None), torch.dtype, torch.device})


def _iter(obj: Any, max_depth: int | None, max_items: int | None) -> Iterator[torch.Tensor]:
    """`_walk` without paths, and quicker: plain tuples and lists read directly, scalars skipped."""
    if type(obj) in LEAVES or (max_depth is not None and max_depth <= 0):
        return
    if type(obj) in (tuple, list):
        children: Iterable[Any] = obj if max_items is None else obj[:max_items]
    else:
        items = _children(obj)
        if items is None:
            return
        children = (value for _, value in itertools.islice(items, max_items))
    deeper = None if max_depth is None else max_depth - 1
    for value in children:
        if isinstance(value, torch.Tensor):
            yield value
        elif type(value) not in LEAVES:
            yield from _iter(value, deeper, max_items)


def _walk(
    obj: Any, path: str | None, max_depth: int | None, max_items: int | None
) -> Iterator[tuple[str | None, torch.Tensor]]:
    if isinstance(obj, torch.Tensor):
        yield path, obj
        return
    if max_depth is not None and max_depth <= 0:
        return
    children = _children(obj)
    if children is None:
        return
    if max_items is not None:
        children = itertools.islice(children, max_items)
    deeper = None if max_depth is None else max_depth - 1
    sequence = isinstance(obj, (list, tuple))
    for key, value in children:
        if path is None:
            sub = None
        elif sequence:
            sub = f"{path}[{key}]"
        else:
            sub = f"{path}.{key}" if path else str(key)
        yield from _walk(value, sub, deeper, max_items)


def float_tensors(obj: Any) -> list[tuple[str, torch.Tensor]]:
    """(path, tensor) for the floating tensors of a nested value."""
    return [(p, t) for p, t in walk(obj) if t.is_floating_point()]


def map_tensors(obj: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """Apply fn to every tensor of a nested value, rebuilding its containers: tuples, lists,
    namedtuples, mappings and dataclasses, including library outputs (transformers ModelOutput,
    diffusers BaseOutput) that are both a dataclass and an OrderedDict and whose fields may have
    no default. Anything else is returned as is."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return _map_dataclass(obj, fn)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # namedtuple
        return type(obj)(*(map_tensors(v, fn) for v in obj))
    if isinstance(obj, (list, tuple)):
        items = [map_tensors(v, fn) for v in obj]
        try:
            return type(obj)(items)
        except Exception:
            return tuple(items) if isinstance(obj, tuple) else items
    if isinstance(obj, Mapping):
        mapped = {key: map_tensors(value, fn) for key, value in obj.items()}
        try:
            out = copy.copy(obj)
            for key, value in mapped.items():
                out[key] = value
            return out
        except Exception:
            return mapped
    return obj


def _map_dataclass(obj: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """A new instance through the class's own constructor (so ModelOutput's dict view is rebuilt);
    if the constructor refuses, a shallow copy with the fields replaced; else a plain dict."""
    fields = dataclasses.fields(obj)
    values = {f.name: map_tensors(getattr(obj, f.name), fn) for f in fields}
    try:
        return type(obj)(**{f.name: values[f.name] for f in fields if f.init})
    except Exception:
        pass
    try:
        out = copy.copy(obj)
        for name, value in values.items():
            object.__setattr__(out, name, value)
            if isinstance(out, dict) and name in out:
                out[name] = value
        return out
    except Exception:
        return values


def cast_floats(obj: Any, dtype: torch.dtype) -> Any:
    """The value with every floating tensor in `dtype` (tensors already in it are not copied)."""
    return map_tensors(obj, lambda t: t.to(dtype) if t.is_floating_point() and t.dtype != dtype else t)


def has_nonfinite(obj: Any) -> bool:
    return any(not bool(torch.isfinite(t).all()) for _, t in float_tensors(obj))


def is_compute_float(t: torch.Tensor) -> bool:
    """Floating, and not a float8 storage format (fp8 weights and their scales are a quantization
    design, never converted, cast to or compared by a dtype policy)."""
    return t.is_floating_point() and t.element_size() > 1


def module_tensors(module: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """A module's parameters and its compute-float buffers, by qualified name."""
    yield from module.named_parameters()
    for n, b in module.named_buffers():
        if b is not None and is_compute_float(b):
            yield n, b


_PLAIN = (torch.Tensor, str, bytes, int, float, complex, bool, type(None), torch.dtype, torch.device)


def own_paths_collide(module: nn.Module, others: Any) -> bool:
    """True if a non-root module path of `module` is also a module path in one of `others`."""
    mine = {name for name, _ in module.named_modules() if name}
    return any(name in mine for other in others for name, _ in other.named_modules() if name)


def isolate_state(obj: Any) -> Any:
    """A module's inputs with their stateful objects (KV caches, dict states) deep-copied, tensors
    kept: an extra run of the module on them cannot change what the real run goes on using.
    Raises for what cannot be copied."""
    if isinstance(obj, (*_PLAIN, nn.Module)) or callable(obj):
        return obj
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(isolate_state(v) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(isolate_state(v) for v in obj)
    if type(obj) is dict:
        return {k: isolate_state(v) for k, v in obj.items()}
    return copy.deepcopy(obj)
