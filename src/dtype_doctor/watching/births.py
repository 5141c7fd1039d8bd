"""Where a parameter or buffer got its dtype: its birth, seen while the model is built or converted.

Under `run` the watch starts with the script, so the model is built under it: each parameter and
buffer registered on a module (`__init__`, `load_state_dict(assign=True)`, a `Parameter` set as an
attribute) is born at the line that registered it, in the dtype it had then. A module-wide
`.to()/.half()/.float()` rebinds each parameter's `.data` to a cast copy: the parameter is born
again there, with its earlier birth as parent. Plain tensor attributes need nothing here: the op
that made them tagged them already.
"""

from __future__ import annotations

import functools
import sys
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.nn.modules import module as torch_module

from .. import remedies
from ..catalog.shared_remedies import CAST_HELD
from ..patches import patch_method
from ..report import Fix, Origin
from . import dtype_values, shared_modules, shared_reads
from .conversions import watch_from_numpy
from .modules import Names
from .provenance import Frame, ParamTag, Provenance, Tag, caller_frames, outermost_user_frame


def _weak(obj: Any) -> Callable[[], Any]:
    if obj is None:
        return lambda: None
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj


BIRTH_RANK = 3  # after an op's (RANKS in provenance.py): see BirthTag


class BirthTag(ParamTag):
    """A parameter's or buffer's birth: the line that made (or converted) it, its qualified name
    and owner read from the model when a finding needs them; the attribute name when the tensor is
    under no watched model (an EMA copy, a model never called)."""

    __slots__ = ("_attribute", "_owner", "outer")

    def __init__(
        self,
        names: Names,
        t: torch.Tensor,
        kind: str,
        attribute: str | None,
        owner: Any,
        frames: tuple[Frame | None, Frame | None],
        op: str | None = None,
        parents: tuple[Tag, ...] = (),
    ) -> None:
        super().__init__(names, t, t.dtype)
        # an output shares a birth only when no other operand in its dtype has an origin: the
        # activation through `self.weight * hidden` is the activation, not the norm weight's birth
        # (a parameter is tagged from the start now; ranked as before, it took over every stream)
        self.rank = BIRTH_RANK
        self.kind = kind
        self.frame, self.user = frames
        self.op = op
        self.parents = parents
        self._attribute = attribute
        self._owner = _weak(owner)  # a tag must not keep a discarded model alive
        # the script's statement that led to the birth when that is not its own line (a model built
        # or converted inside a helper of yours: the call that chose, or forgot, its dtype)
        self.outer = outermost_user_frame(3)

    def held_as(self) -> tuple[Any, str | None]:
        """(the module that holds the tensor, None once it is gone; the attribute it is held as)."""
        return self._owner(), self._attribute

    def _resolve(self) -> None:
        kind = self.kind
        super()._resolve()
        if Tag.name.__get__(self) is None:  # under no watched model: known by its attribute
            owner = self._owner()
            prefix = type(owner).__name__ if owner is not None else None
            self.kind = kind
            Tag.name.__set__(self, ".".join(p for p in (prefix, self._attribute) if p) or None)
            Tag.module.__set__(self, owner)


class Births:
    """Tags parameters and buffers at their birth; `start()` returns the undo."""

    def __init__(self, prov: Provenance, names: Names, on_error: Callable[[BaseException], None]) -> None:
        self.prov = prov
        self.names = names
        self.on_error = on_error
        self._decided_memo: tuple[Any, tuple[Tag, ...]] = (None, ())

    def start(self) -> Callable[[], None]:
        handles = [
            torch_module.register_module_parameter_registration_hook(self._on_parameter),
            torch_module.register_module_buffer_registration_hook(self._on_buffer),
            torch_module.register_module_module_registration_hook(self._on_module),
        ]
        unpatch = patch_method(torch.nn.Parameter, "__new__", self._around_new_parameter)
        unattr = patch_method(torch.nn.Module, "__setattr__", self._around_setattr)
        unload = self._watch_load()
        unnumpy = watch_from_numpy(self.prov, self.on_error)

        def undo() -> None:
            unattr()
            unnumpy()
            unload()
            unpatch()
            for h in handles:
                h.remove()

        return undo

    def _watch_load(self) -> Callable[[], None]:
        """`torch.load`: what a checkpoint holds (a pickled model's parameters, a state dict's
        tensors) is born at the user's load line, in the dtype it was saved in."""
        original = torch.load

        @functools.wraps(original)
        def load(*args: Any, **kwargs: Any) -> Any:
            loaded = original(*args, **kwargs)
            try:
                self._loaded(loaded, caller_frames(2), 0)
            except Exception as exc:
                self.on_error(exc)
            return loaded

        torch.load = load

        def undo() -> None:
            if torch.load is load:
                torch.load = original

        return undo

    def _loaded(self, obj: Any, frames: tuple[Frame | None, Frame | None], depth: int) -> None:
        if isinstance(obj, torch.nn.Module):
            for module in obj.modules():
                for kind, table in (("parameter", module._parameters), ("buffer", module._buffers)):
                    for name, t in table.items():
                        if t is not None and t.is_floating_point():
                            tag = BirthTag(self.names, t, kind, name, module, frames, "torch.load")
                            self.prov.set(t, tag)
        elif isinstance(obj, torch.Tensor):
            if obj.is_floating_point():
                self.prov.set(obj, Tag("op", obj.dtype, "torch.load", None, None, *frames))
        elif depth < 3 and isinstance(obj, dict):
            for value in list(obj.values())[:4096]:
                self._loaded(value, frames, depth + 1)
        elif depth < 3 and isinstance(obj, (list, tuple)):
            for value in obj[:4096]:
                self._loaded(value, frames, depth + 1)

    def _around_new_parameter(
        self, call_next: Callable[..., Any], cls: Any, *args: Any, **kwargs: Any
    ) -> Any:
        """`nn.Parameter(t)` (torch sees no op: a new tensor object on t's storage) takes t's origin:
        a free parameter, an EMA or deep copy's, keeps the birth of the tensor it was made from."""
        param = call_next(cls, *args, **kwargs)
        try:
            data = args[0] if args else kwargs.get("data")
            if isinstance(data, torch.Tensor) and param is not data and param.dtype == data.dtype:
                made = self.prov.lookup(data)
                if made is not None:
                    self.prov.set(param, made)
        except Exception as exc:
            self.on_error(exc)
        return param

    def _around_setattr(self, call_next: Callable[..., Any], module: Any, name: str, value: Any) -> Any:
        """`self.<name> = <a dtype>`: where that dtype value came from (dtype_values)."""
        if type(value) is torch.dtype:
            try:
                dtype_values.record_attribute(module, name, dtype_values.user_frame())
            except Exception as exc:
                self.on_error(exc)
        return call_next(module, name, value)

    def _on_module(self, parent: Any, name: str, child: Any) -> None:
        try:
            if isinstance(child, torch.nn.Module):
                self._shared(parent, child)
        except Exception as exc:  # never let the tool's bookkeeping fail the user's model
            self.on_error(exc)

    def _shared(self, parent: Any, child: Any) -> None:
        """A module attached to a second model: its odd-dtype tensors' lineage gets the lines it
        was handed over through (a memoised factory's lookup and its key)."""
        held = shared_modules.record_child(parent, child)
        sites = list(shared_modules.shared_sites(child))
        for t in held:
            tag = self.prov.lookup(t)
            if tag is not None:
                tag.parents = (*dtype_values.value_tags(sites, t.dtype), *tag.parents)

    def _on_parameter(self, module: Any, name: str, value: Any) -> None:
        self._born(module, name, value, "parameter")

    def _on_buffer(self, module: Any, name: str, value: Any) -> None:
        self._born(module, name, value, "buffer")

    def _born(self, module: Any, name: str, value: Any, kind: str) -> None:
        try:
            if isinstance(value, torch.Tensor) and not value.is_floating_point():
                self._born_chosen(module, name, value, kind)
            elif isinstance(value, torch.Tensor) and value.is_floating_point():
                made = self.prov.lookup(value)  # the tensor it was made from, in its dtype
                parents = (made,) if made is not None and made.dtype == value.dtype else ()
                if parents and isinstance(made, BirthTag):
                    parents = made.parents  # registered again (a loader's setattr): one birth
                tag = BirthTag(self.names, value, kind, name, module, caller_frames(4), parents=parents)
                self.prov.set(value, tag)
        except Exception as exc:  # never let the tool's bookkeeping fail the user's model
            self.on_error(exc)

    def _born_chosen(self, module: Any, name: str, value: torch.Tensor, kind: str) -> None:
        """A non-floating parameter or buffer made with a `dtype=` the code computed (a cache
        allocated in the dtype read off a weight that quantization made int8): born here, the
        lines that dtype value came through as its parents. Integer tensors made in a literal
        dtype or none (position ids, masks) are not followed."""
        frames = caller_frames(4)
        sites = dtype_values.factory_value_sites(frames[0], value.dtype)
        if sites:
            tags = dtype_values.value_tags(sites, value.dtype)
            self.prov.set(value, BirthTag(self.names, value, kind, name, module, frames, parents=tags))

    def rebound(self, target: Any, value: Any) -> None:
        """`target.data = value` (a module-wide cast, or the user's own): the parameter is born
        again in the value's dtype, where the value was made, its earlier birth as parent."""
        try:
            self._rebound(target, value)
        except Exception as exc:  # never let the tool's bookkeeping fail the user's model
            self.on_error(exc)

    def _decided(self, user: Frame | None, dtype: torch.dtype) -> tuple[Tag, ...]:
        """dtype_values.decided_by, once per conversion statement (not per parameter)."""
        key = (user, dtype, id(sys._getframe(3)))
        if self._decided_memo[0] != key:
            self._decided_memo = (key, dtype_values.decided_by(user, dtype))
        return self._decided_memo[1]

    def _rebound(self, target: Any, value: Any) -> None:
        if not isinstance(target, torch.Tensor) or not isinstance(value, torch.Tensor):
            return
        if not target.is_floating_point():
            return
        before = self.prov.lookup(target)
        made = self.prov.lookup(value)
        if before is not None and before.dtype == target.dtype and made is before:
            return  # rebound to itself (`.float()` of a float32 parameter): nothing changed
        frames = (made.frame, made.user) if made is not None and made.frame is not None else caller_frames(4)
        op = made.op if made is not None and made.kind in ("cast", "op") else None
        parents = tuple(t for t in (before,) if t is not None and t.dtype != target.dtype)
        if op is not None:  # a module-wide conversion: made under `if x.dtype == ...`, x decided it
            parents = (*self._decided(frames[1], target.dtype), *parents)
        kind = before.kind if isinstance(before, BirthTag) else "parameter"
        owner, attribute = before.held_as() if isinstance(before, BirthTag) else (None, None)
        self.prov.set(target, BirthTag(self.names, target, kind, attribute, owner, frames, op, parents))


def attribute_path(model: str, qual: str, kind: str) -> str:
    """`model.blocks[0].bias` for `blocks.0.bias`; `model.get_parameter("…")` when a part is no name."""
    parts = qual.split(".")
    if all(p.isidentifier() or p.isdigit() for p in parts):
        return model + "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in parts)
    getter = "get_buffer" if kind == "buffer" else "get_parameter"
    return f'{model}.{getter}("{qual}")'


def held_fix(
    origins: list[Origin], root: torch.nn.Module, model: str, want: torch.dtype, call: str | None
) -> Fix | None:
    """Cast each parameter or buffer born in another dtype (every odd one: a key and a value alike),
    once, after the model is built: paths the model really has (checked), never a cast in forward."""
    paths: list[str] = []
    born: list[str] = []
    for origin in origins:
        if origin.kind not in ("parameter", "buffer") or not origin.name or not origin.file:
            continue
        try:
            qual = origin.name
            held = root.get_buffer(qual) if origin.kind == "buffer" else root.get_parameter(qual)
        except (AttributeError, TypeError):
            continue  # named relative to another model: no path to write
        if shared_reads.shared_owner(origin, root) is not None:
            continue  # held by a module another model shares: cast once, it would be wrong for one of them
        path = attribute_path(model, qual, origin.kind)
        if held.is_floating_point() and held.dtype != want and path not in paths:
            paths.append(path)
            born.append(f"`{path}` {origin.dtype} at {origin.file}:{origin.line}")
    file, _, line = (call or "").rpartition(":")
    at = {"file": file, "line": int(line)} if file and line.isdigit() else {}
    return remedies.make(CAST_HELD, **at, held=paths, born=born, want=str(want)[6:])
