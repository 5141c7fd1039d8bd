"""Giving each new floating output the origin of its dtype (the hot path after every torch call).

An output that keeps an input's dtype shares that input's Tag; an op that decides a new
dtype (creation, cast, promotion, autocast) makes a new Tag whose first parent is the
operand the result took its dtype from. Module calls made from user code tag their outputs
as "output of <Class> called at file:line", so origins cross model borders.
"""

from __future__ import annotations

import linecache
import re
import sys
from typing import Any

import torch

from ..tensors import iter_tensors
from ..tracing.casts import INHERITING
from . import dtype_values, made_names
from .autocast_regions import enclosing_region
from .followed_dtype import followed_at
from .mode import CAST, TAKES_DTYPE
from .modules import ModuleStack, Names
from .provenance import Frame, ParamTag, Provenance, Tag, caller_frames, qualified_op_name

Tensor = torch.Tensor
Parameter = torch.nn.Parameter

_MAX_DEPTH = 6  # origin chains longer than this are cut (a loop that re-casts a carried tensor)
_DTYPE_OF = re.compile(r"\.(?:to|type)\(\s*(?:dtype\s*=\s*)?([A-Za-z_]\w*)\.dtype\s*[,)]")
_ASSIGNED = re.compile(r"^\s*([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)\s*=[^=]")
_sources: dict[tuple[int, int], str | None] = {}
_names: dict[Any, str] = {}
_any_autocast = getattr(torch._C, "_is_any_autocast_enabled", lambda: True)


def _cached_op_name(func: Any) -> str:
    try:
        return _names[func]
    except KeyError:
        name = _names[func] = qualified_op_name(func)
        return name
    except TypeError:
        return qualified_op_name(func)


def _depth(tag: Tag) -> int:
    d, t = 0, tag
    while t.parents and d < _MAX_DEPTH:
        t = t.parents[0]
        d += 1
    return d


def _source_match(frame: Frame | None, pattern: re.Pattern) -> str | None:
    """The first group of `pattern` on the frame's source line (cached per code and line)."""
    if frame is None:
        return None
    key = (id(frame[0]), frame[1] * 2 + (pattern is _ASSIGNED))  # the code is kept by provenance
    if key not in _sources:
        line = linecache.getline(frame[0].co_filename, frame[1])
        m = pattern.search(line)
        _sources[key] = m.group(1) if m else None
    return _sources[key]


def assigned_name(frame: Frame | None) -> str | None:
    """`emb` for a call site `emb = text_encoder(ids)[0]`: the variable the user keeps it in."""
    return _source_match(frame, _ASSIGNED)


def made_name(frame: Frame | None, op: str) -> str | None:
    """The variable that holds what `op` made on the frame's line: not `ds` in
    `ds = TensorDataset(torch.from_numpy(a))`, where the tensor is an argument of another call."""
    name = assigned_name(frame)
    if name is None or frame is None:
        return None
    return name if made_names.holds(linecache.getline(frame[0].co_filename, frame[1]), op) else None


def autocast_dtype(device_type: str) -> torch.dtype | None:
    if not _any_autocast():
        return None
    try:
        if torch.is_autocast_enabled(device_type):
            return torch.get_autocast_dtype(device_type)
    except (RuntimeError, ValueError):
        pass
    return None


# conversions whose result's dtype is inferred from the data (Python ints give int64): an integer
# tensor made there is born there too (a target a loss needs floating); other integer results
# (indices, masks, counts) stay untagged
_FROM_DATA = frozenset({"torch.tensor", "torch.as_tensor", "torch.asarray"})
_INTEGERS = frozenset({torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8})


def _inferred_integer(func: Any, out: torch.Tensor) -> bool:
    return out.dtype in _INTEGERS and _cached_op_name(func) in _FROM_DATA


class Tagger:
    def __init__(self, prov: Provenance, names: Names, stack: ModuleStack) -> None:
        self.prov = prov
        self.names = names
        self.stack = stack
        self._born: dict[tuple, Tag] = {}  # call site → the Tag of the tensors born there

    def tag(self, func: Any, kind: Any, inputs: Any, out: Any) -> None:
        """Give each new floating output the origin of its dtype (hot path: keep it lean)."""
        if isinstance(out, torch.Tensor):
            outs: Any = (out,)
        elif isinstance(out, (tuple, list)):
            outs = [o for o in out if isinstance(o, torch.Tensor)]
        else:
            return
        lookup = self.prov.lookup
        n = len(inputs)
        if n == 1:  # most ops: the output's dtype is its input's, or the op changed it
            i = inputs[0]
            di = i.dtype
            for o in outs:
                if o._base is not None and lookup(o) is not None:
                    continue  # a view of a tagged tensor: looked up through its base
                if o.dtype == di:
                    if kind is CAST and self._dtype_from_other(o):
                        continue
                    if o is i:
                        continue
                    if getattr(kind, "name", None) in INHERITING and lookup(i) is not None:
                        self._new_tag(func, kind, inputs, o, False)  # a new tensor, its dtype inherited
                        continue
                    parent = lookup(i) or self._parameter_tag(inputs, di)
                    if parent is not None and parent.kind == "autocast" and self._kept_low(func, o, parent):
                        continue
                    if parent is not None:
                        self.prov.set(o, parent)
                    else:  # made during the run from an untracked tensor: born here
                        self._new_tag(func, kind, inputs, o, False)
                elif o.is_floating_point() or o.is_complex():
                    self._new_tag(func, kind, inputs, o, False)
            return
        promoted = False
        if n > 1 and kind is not CAST:
            d0 = inputs[0].dtype
            for i in inputs:
                if i.dtype != d0:
                    promoted = len({i.dtype for i in inputs if i.dim() > 0}) > 1
                    break
        for o in outs:
            if not (o.is_floating_point() or o.is_complex()) or (
                o._base is not None and lookup(o) is not None
            ):
                continue
            if any(o is i for i in inputs):
                continue  # in-place or returned as is: its origin stands
            if not promoted and n:
                dt = o.dtype
                parent, same = self._best_tag(inputs, dt)
                if parent is None and same:
                    parent = self._parameter_tag(inputs, dt)
                if parent is not None:
                    self.prov.set(o, parent)  # the dtype came with this input: share its origin
                    continue
            self._new_tag(func, kind, inputs, o, promoted)

    def tag_untagged(self, func: Any, kind: Any, inputs: list, out: Any) -> None:
        """The output of a call whose floating operands `inputs` (maybe none) share one dtype, when
        `Provenance.share` gave it none of their tags: a factory's result is born; several outputs,
        or one in a new dtype, take `tag`; one made from untracked operands takes a parameter's tag
        (named when a finding reads it) or is born here."""
        if type(out) is not Tensor:  # several outputs
            self.tag(func, kind, inputs, out)
            return
        if out._base is not None and self.prov.lookup(out) is not None:
            return  # a view of a tagged tensor: looked up through its base
        if not inputs:  # a factory, integer operands: a floating result is born
            if out.is_floating_point() or out.is_complex() or _inferred_integer(func, out):
                self._new_tag(func, kind, (), out, False)
            return
        if out.dtype is not inputs[0].dtype:
            self.tag(func, kind, inputs, out)  # the op decided a new dtype
            return
        parent = self._parameter_tag(inputs, out.dtype)
        if parent is None:  # made during the run from untracked tensors: its dtype is born here
            self._new_tag(func, kind, inputs, out, False)
            return
        self.prov.set(out, parent)

    def _best_tag(self, inputs: Any, dt: torch.dtype) -> tuple[Tag | None, bool]:
        """The origin an output in dtype `dt` shares: the best-ranked tag among the inputs in `dt`
        (a model input beats a parameter beats an op); and whether any input has `dt`."""
        lookup = self.prov.lookup
        parent = None
        same = False
        for i in inputs:
            if i.dtype == dt:
                same = True
                t = lookup(i)
                if t is not None and (parent is None or t.rank < parent.rank):
                    parent = t
                    if t.rank == 0:
                        break
        return parent, same

    def _kept_low(self, func: Any, o: torch.Tensor, parent: Tag) -> bool:
        """An op that takes dtype= (log_softmax, softmax, cumsum) left an autocast-born tensor in
        autocast's dtype: born again here, the region's last chance to compute it in float32."""
        if getattr(func, "__name__", None) not in TAKES_DTYPE or autocast_dtype(o.device.type) != o.dtype:
            return False
        inner, user = caller_frames(4)
        if inner is None or inner != user:
            return False  # inside a library: its caller's line is no place to pass dtype=
        tag = Tag("autocast", o.dtype, _cached_op_name(func), made_name(inner, _cached_op_name(func)),
                  self.stack.top, inner, user, (parent,))  # fmt: skip
        tag.region = enclosing_region(3)
        self.prov.set(o, tag)
        return True

    def _dtype_from_other(self, o: torch.Tensor) -> bool:
        """`t.to(dtype=x.dtype)` that changed nothing: t keeps that dtype because x has it, a
        decision made at this line."""
        inner, user = caller_frames(4)
        name = _source_match(inner, _DTYPE_OF)
        if name is None or inner is None:
            return False
        f = sys._getframe(2)
        while f is not None and (f.f_code is not inner[0]):
            f = f.f_back
        other = f.f_locals.get(name) if f is not None else None
        if not isinstance(other, torch.Tensor) or other.dtype != o.dtype or other is o:
            return False
        if inner != user:  # a library's `t_emb.to(dtype=sample.dtype)`: the user's `sample` decides
            return self._share_origin(o, other)
        parent = self.prov.lookup(other) or self._parameter_tag([other], other.dtype)
        if parent is None:
            return False
        # the user's line chose x's dtype (`latents.to(embeds.dtype)`): a cast there, born of x's origin
        made = made_name(inner, "Tensor.to")
        self.prov.set(o, Tag("cast", o.dtype, "Tensor.to", made, self.stack.top, inner, user, (parent,)))
        return True

    def tag_copy(self, src: Any, out: torch.Tensor) -> None:
        if isinstance(src, torch.Tensor) and src.dtype == out.dtype:
            t = self.prov.lookup(src)
            if t is not None:
                self.prov.set(out, t)

    def _new_tag(self, func: Any, kind: Any, inputs: Any, o: torch.Tensor, promoted: bool) -> None:
        """The op decided this output's dtype (creation, cast, promotion, autocast): remember where."""
        prov = self.prov
        dt = o.dtype
        tags = []
        seen_dt = set()
        # the operand whose dtype the result took comes first: a chain follows it
        for i in sorted(inputs, key=lambda t: t.dtype != dt) if promoted else inputs:
            if i.dtype not in seen_dt:
                seen_dt.add(i.dtype)
                t = prov.lookup(i)
                if t is None and promoted and i.dtype == dt:
                    t = self._parameter_tag([i], dt)
                if t is not None and _depth(t) < _MAX_DEPTH:
                    tags.append(t)
        inner, user = caller_frames(4)
        if kind is CAST:
            new_kind = "cast"
        elif _any_autocast() and autocast_dtype(o.device.type) == dt:
            new_kind = "autocast"  # autocast chose this dtype, not the code
        else:
            new_kind = "promotion" if promoted else "op"
        top = self.stack.top
        if kind is CAST and inner is not None and inner == user:
            tags = [*dtype_values.cast_value_tags(inner, dt), *tags]  # the dtype's own origin first
        if tags:
            name = made_name(inner, _cached_op_name(func)) if inner is not None and inner == user else None
            tag = Tag(new_kind, dt, _cached_op_name(func), name, top, inner, user, tuple(tags))
            if new_kind == "autocast":
                tag.region = enclosing_region(3)
            prov.set(o, tag)
            return
        if new_kind == "op" and inner is not None and self._followed(inner, o):
            return  # `torch.zeros(n, dtype=w.dtype)`: born where w's dtype was
        # a tensor born with no tracked parent (a factory): one Tag per call site, shared
        # codes by id (provenance keeps them alive): hashing a code object hashes its bytecode
        key = (
            func,
            new_kind,
            dt,
            id(inner[0]) if inner else None,
            inner and inner[1],
            user and id(user[0]),
            user and user[1],
            top,
        )
        try:
            tag = self._born.get(key)
        except TypeError:  # an unhashable callable or module
            key, tag = None, None
        if tag is None:
            mine = inner is not None and inner == user
            name = made_name(inner, _cached_op_name(func)) if mine else None
            # `torch.arange(n, dtype=dtype)`: the dtype value's own lines (`dtype = torch.float32`)
            sites = dtype_values.factory_value_sites(inner, dt) if mine and new_kind == "op" else []
            parents = dtype_values.value_tags(sites, dt) if sites else ()
            tag = Tag(new_kind, dt, _cached_op_name(func), name, top, inner, user, parents)
            if new_kind == "autocast":
                tag.region = enclosing_region(3)
            if key is not None:
                self._born[key] = tag
        prov.set(o, tag)

    def _followed(self, inner: Frame, o: torch.Tensor) -> bool:
        """A factory given `dtype=x.dtype`: `o` shares the origin of x, whose dtype it took."""
        other = followed_at(inner, o.dtype)
        return other is not None and self._share_origin(o, other)

    def _share_origin(self, o: torch.Tensor, other: torch.Tensor) -> bool:
        """`o` took its dtype from `other`: it gets other's origin (False when other has none)."""
        if other is o:
            return False
        tag = self.prov.lookup(other) or self._parameter_tag([other], other.dtype)
        if tag is None:
            return False
        self.prov.set(o, tag)
        return True

    def _parameter_tag(self, inputs: Any, dt: torch.dtype) -> Tag | None:
        """An output that took its dtype from a parameter or buffer: tag that tensor once, by name."""
        for i in inputs:
            if i.dtype == dt:
                if isinstance(i, Parameter):  # named when a finding reads it: naming walks the model
                    tag = ParamTag(self.names, i, dt)
                    self.prov.set(i, tag)
                    return tag
                known = self.names.tensor(i)
                if known is not None:
                    kind, qual, owner = known
                    tag = Tag(kind, dt, None, qual, owner)
                    self.prov.set(i, tag)
                    return tag
        return None

    def tag_inputs(self, module: torch.nn.Module, op: str, items: list[tuple[str, Any]]) -> None:
        """Tag the floating tensors among a root call's arguments as model inputs."""
        inner, user = caller_frames(4)
        call_site = user or inner  # a model input is born where the user called the model

        def tag(value: Any, name: str) -> None:
            if isinstance(value, torch.Tensor):
                if value.is_floating_point() or (value.dtype in _INTEGERS and self.prov.lookup(value)):
                    prev = self.prov.lookup(value)
                    parents = (prev,) if prev is not None and prev.kind != "input" else ()
                    self.prov.set(
                        value, Tag("input", value.dtype, op, name, module, call_site, None, parents)
                    )
            elif isinstance(value, (list, tuple)):
                for i, v in enumerate(value[:64]):
                    if isinstance(v, torch.Tensor):
                        tag(v, f"{name}[{i}]")
            elif isinstance(value, dict):
                for k, v in list(value.items())[:64]:
                    if isinstance(v, torch.Tensor):
                        tag(v, f"{name}[{k!r}]")

        for name, value in items:
            tag(value, name)

    def tag_module_output(self, module: torch.nn.Module, args: tuple, output: Any) -> None:
        """A module called from user code: its floating outputs are "output of <Class> at file:line"."""
        _, user = caller_frames(3)
        if user is None:
            return
        name = assigned_name(user)
        cls = type(module).__name__

        for value in iter_tensors(output, max_depth=2, max_items=16):  # ModelOutput, tuples...
            if not value.is_floating_point() or any(value is a for a in args):
                continue  # handed through unchanged: its origin stands
            prev = self.prov.lookup(value)
            parents = (prev,) if prev is not None else ()
            held = self._held_birth(module, value.dtype)  # the model's own dtype, where it was chosen
            parents = (*parents, held) if held is not None and held is not prev else parents
            self.prov.set(value, Tag("output", value.dtype, cls, name, module, user, None, parents))

    def _held_birth(self, module: torch.nn.Module, dtype: torch.dtype) -> Tag | None:
        """The birth of the module's first floating parameter when it is in `dtype` (`.to(bfloat16)`
        at the line that converted the model): an output in the model's dtype got it there too."""
        for p in module.parameters():
            if p.is_floating_point():
                tag = self.prov.lookup(p) if p.dtype == dtype else None
                return tag if tag is not None and tag.kind in ("parameter", "buffer") else None
        return None
