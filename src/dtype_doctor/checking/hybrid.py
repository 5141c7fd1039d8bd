"""The dry run's hybrid of real and meta tensors: values the model reads are real, the rest is meta.

Weights and floating activations live on `meta` (no memory, no compute). The user's integer and bool
inputs (ids, masks, positions) stay real on CPU, and every op whose tensors are all real runs for
real, so masking utilities, `.item()`, `.tolist()`, `nonzero` and boolean indexing see true values.
Where a real tensor meets a meta one it joins it on meta. Integer/bool tensors the model creates on
the meta device (`torch.arange(n, device=x.device)`) are made on CPU instead, since they carry values.

A value read from meta (a floating activation's `isfinite().all()`, routing indices from a meta
`topk`) cannot be known: the typical value is assumed (True, finite, 0) and recorded, so the report
says what was assumed. An op whose meta kernel rejects a dtype it accepts on an accelerator (MoE
`grouped_mm` accepts only bfloat16 on meta) is run in a dtype meta accepts and its outputs cast back,
also recorded: that is a gap of meta, not the user's bug.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from ..dtypes import dtype_name

__all__ = ["Assumption", "HybridMode", "Recording"]

aten = torch.ops.aten
META = torch.device("meta")
_SMALL = 1 << 16  # elements: a floating tensor made from nothing (a mask of ones) up to this is real
_MAX_MATERIALISE = 1 << 24  # elements: a meta tensor whose values must be assumed is made real up to this
_VALUE_OPS = {aten._local_scalar_dense.default, aten.equal.default, aten.is_nonzero.default}
# ops the all-meta fast path leaves to the full path: value reads, copies off meta, boolean indices
_SPECIAL = {
    *_VALUE_OPS,
    aten._to_copy.default,
    aten.index.Tensor,
    aten.index_put_.default,
    aten.index_put.default,
}
# ops that read only the shape of their tensor argument: an integer/bool result is made real
_FILLS = {
    "ones_like": lambda a: 1, "new_ones": lambda a: 1, "zeros_like": lambda a: 0, "new_zeros": lambda a: 0,
    "empty_like": lambda a: 0, "new_empty": lambda a: 0, "full_like": lambda a: a[1], "new_full": lambda a: a[2],
}  # fmt: skip


@dataclass
class Assumption:
    """A value the dry run could not know and assumed, where the model read it."""

    op: str
    what: str
    file: str | None = None
    line: int | None = None
    count: int = 1


@dataclass
class Log:
    items: dict[tuple, Assumption] = field(default_factory=dict)
    version: int = 0  # bumped by each add: a call that assumed something is never memoized

    def add(self, op: str, what: str) -> None:
        self.version += 1
        file, line = _user_line()
        key = (op, what, file, line)
        if key in self.items:
            self.items[key].count += 1
        else:
            self.items[key] = Assumption(op, what, file, line)


def _user_line() -> tuple[str | None, int | None]:
    """The innermost frame outside torch and dtype_doctor: the model's line that read the value."""
    for frame in reversed(traceback.extract_stack(limit=60)):
        name = frame.filename.replace("\\", "/")
        if "/torch/" not in name and "/dtype_doctor/" not in name and "<" not in name[:1]:
            return frame.filename, frame.lineno
    return None, None


def _flat_tensors(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The tensors among aten arguments (which nest at most a list deep: index lists, cat inputs)."""
    out = []
    for x in (*args, *kwargs.values()):
        if isinstance(x, torch.Tensor):
            out.append(x)
        elif isinstance(x, (list, tuple)):
            out.extend(y for y in x if isinstance(y, torch.Tensor))
    return out


def _flat_map(fn: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """fn applied to each tensor among aten arguments (a list deep at most, as in _flat_tensors)."""

    def one(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return fn(x)
        if type(x) is list or type(x) is tuple:
            return type(x)(fn(y) if isinstance(y, torch.Tensor) else y for y in x)
        return x

    return tuple(map(one, args)), {key: one(value) for key, value in kwargs.items()}


def _is_meta(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.is_meta


def is_real(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and not x.is_meta


def _carries_values(dtype: torch.dtype) -> bool:
    return not (dtype.is_floating_point or dtype.is_complex)


def _typical(t: torch.Tensor) -> torch.Tensor:
    """A real stand-in for a meta tensor whose values are read: True for bools, zeros otherwise."""
    if t.numel() > _MAX_MATERIALISE:
        raise RuntimeError(f"values of a {tuple(t.shape)} meta tensor are needed and too large to assume")
    fill = True if t.dtype == torch.bool else 1  # a count or a length of one: a valid shape
    return torch.full(t.shape, fill, dtype=t.dtype)


def _to_meta(x: Any) -> Any:
    return x.to(META) if is_real(x) else x


_READS = {
    "_local_scalar_dense": "item() / bool(tensor)",
    "is_nonzero": "bool(tensor)",
    "equal": "torch.equal",
}


def _name(func: Any) -> str:
    name = str(getattr(func, "__name__", func)).split(".")[0]
    return _READS.get(name, name)


_SCALAR_TYPES = frozenset({int, float, bool, complex, str, type(None), torch.dtype, torch.device,
                           torch.memory_format, torch.layout})  # fmt: skip
_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)
_pure: dict[Any, bool] = {}  # op -> whether its output is a fresh tensor (no mutation, no alias)


def _is_pure(func: Any) -> bool:
    try:
        return _pure[func]
    except KeyError:
        schema = getattr(func, "_schema", None)
        pure = (
            schema is not None
            and not schema.is_mutable
            and all(r.alias_info is None for r in schema.returns)
            and torch.Tag.nondeterministic_seeded not in getattr(func, "tags", ())
        )
        _pure[func] = pure
        return pure


_fills: dict[Any, Any] = {}  # op -> its _FILLS entry (None for most)


def _fill_of(func: Any) -> Any:
    try:
        return _fills[func]
    except KeyError:
        fill = _fills[func] = _FILLS.get(func.__name__.split(".")[0])
        return fill


def _filled(func: Any, args: tuple, out: Any) -> Any:
    """An integer/bool output of a fill op (ones_like, new_zeros...): made real with its values, a
    mask made like an activation; any other output as it is."""
    fill = _fill_of(func)
    if fill is not None and isinstance(out, torch.Tensor) and _carries_values(out.dtype):
        return torch.full(out.shape, fill(args), dtype=out.dtype)
    return out


def op_key(func: Any, args: tuple, kwargs: dict) -> tuple:
    """What an op's (or a torch call's) output metadata can depend on: the op, the default dtype and
    its arguments (_key_of). Raises TypeError where there is no such key (a real tensor)."""
    kw = _key_of(tuple(kwargs.items())) if kwargs else ()
    return (func, torch.get_default_dtype(), _key_of(args), kw)


def _key_of(x: Any) -> Any:
    """What a meta kernel's output can depend on in an argument; raises TypeError for anything else."""
    cls = type(x)
    if cls in _PLAIN_TENSORS:
        if not x.is_meta or x.layout is not torch.strided or x.is_conj() or x.is_neg():
            raise TypeError
        return (x.shape, x.stride(), x.storage_offset(), x.dtype)
    if cls in _SCALAR_TYPES:
        return (cls, x)  # 2 and 2.0 (and True) are equal keys but promote differently
    if cls is list or cls is tuple or cls is torch.Size:
        return (cls, tuple(map(_key_of, x)))
    raise TypeError


def spec_of(out: Any) -> Any:
    """How to make `out` again (a meta tensor's metadata, or a tuple of them); None if it cannot be."""
    if type(out) is torch.Tensor:
        if (
            not out.is_meta
            or out.layout is not torch.strided
            or out.storage_offset()
            or out.is_conj()
            or out.is_neg()
        ):
            return None
        return (out.shape, out.stride(), out.dtype)
    if type(out) is tuple or type(out) is list:
        specs = [spec_of(x) for x in out]
        return None if any(s is None for s in specs) else (type(out), specs)
    return None


def remade(spec: tuple) -> Any:
    if len(spec) == 3:
        return torch.empty_strided(spec[0], spec[1], dtype=spec[2], device=META)
    cls, specs = spec
    return cls(remade(s) for s in specs)


class HybridMode(TorchDispatchMode):
    """See the module docstring. `log` collects the assumptions made.

    An op whose tensors are all on meta and whose output is a fresh tensor (no in-place write, no
    view) gets the output's metadata from a meta kernel that is a function of the operands' metadata
    (shape, strides, dtype) and the other arguments only: met again with the same ones, as in every
    copy of a repeated block, its output is made from the first answer (`_memo`) instead of running
    torch's Python shape rules again. The op itself still reaches the contracts each time."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch would wrap __torch_dispatch__ in dynamo's disable (two frames and four eval-frame
        # switches per op, ~8% of a dry run); a dry run on meta is never compiled
        return False

    def __init__(self, log: Log, memo: dict[tuple, Any] | None = None) -> None:
        super().__init__()
        self.log = log
        self.aside = 0  # > 0 while an op runs all on meta (attention: its causal mask is never read)
        self._memo: dict[tuple, Any] = {} if memo is None else memo
        self.recording: Recording | None = None  # what the ops under one torch call did (function_memo)

    def _memoized(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """The meta kernel's output, made from `_memo` when the same op met the same operands."""
        if not _is_pure(func):
            return func(*args, **kwargs)
        try:
            key = op_key(func, args, kwargs)
        except TypeError:
            return func(*args, **kwargs)
        spec = self._memo.get(key)
        if spec is not None:
            return remade(spec)
        out = func(*args, **kwargs)
        spec = spec_of(out)
        if spec is not None:
            self._memo[key] = spec
        return out

    def _known(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """The output of an op met before with the same all-meta operands (every copy of a repeated
        block), made from the memo with nothing else looked at; None if it is not one."""
        try:
            key = op_key(func, args, kwargs)
        except TypeError:  # a real tensor among the operands, or an argument no key is made of
            return None
        spec = self._memo.get(key)
        return None if spec is None else _filled(func, args, remade(spec))

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        out = self._dispatch(func, args, kwargs or {})
        if self.recording is not None:
            self.recording.saw(func, out)
        return out

    def _dispatch(self, func: Any, args: tuple, kwargs: dict) -> Any:
        if self.aside:  # attention's decomposition: its tensors (the causal mask too) are on meta
            return self._memoized(func, args, kwargs)
        if _is_pure(func):  # the memo holds only answers the paths below gave for all-meta operands
            out = self._known(func, args, kwargs)
            if out is not None:
                return out
        tensors = _flat_tensors(args, kwargs)
        metas = [t for t in tensors if t.is_meta]
        if len(metas) == len(tensors) and metas and func not in _SPECIAL:
            return self._all_meta(func, args, kwargs)  # the common case: a floating activation's op
        if func in _VALUE_OPS and metas:
            self.log.add(_name(func), _read_text(metas[0]))
            args, kwargs = tree_map(lambda x: _typical(x) if _is_meta(x) else x, (args, kwargs))
            return func(*args, **kwargs)
        if func is aten._to_copy.default and is_real(args[0]) and kwargs.get("device") == META:
            kwargs = {k: v for k, v in kwargs.items() if k != "device"}  # real values stay real
            return func(*args, **kwargs)
        if func is aten._to_copy.default and metas and kwargs.get("device") not in (None, META):
            self.log.add("copy to CPU (.cpu()/.tolist())", _read_text(args[0]))
            return func(_typical(args[0]), **kwargs)
        if not metas:
            return self._real(func, args, kwargs, tensors)
        if func._schema.is_mutable and any(is_real(t) for t in _mutated(func, args, kwargs)):
            return self._into_real(func, args, kwargs)
        return _filled(func, args, self._meta(func, args, kwargs))

    def _all_meta(self, func: Any, args: tuple, kwargs: dict) -> Any:
        try:
            out = self._memoized(func, args, kwargs)
        except (NotImplementedError, RuntimeError):
            return self._meta(func, args, kwargs)  # data-dependent, or a dtype meta rejects
        return _filled(func, args, out)

    def _real(self, func: Any, args: tuple, kwargs: dict, tensors: list) -> Any:
        out = func(*args, **kwargs)
        if tensors or not isinstance(out, torch.Tensor) or not out.is_meta:
            return out
        if not _carries_values(out.dtype) and out.numel() > _SMALL:
            return out  # a floating tensor made on meta stays there: no memory
        kwargs = {**kwargs, "device": torch.device("cpu")}  # ids, positions, masks made on meta: real
        out = func(*args, **kwargs)
        return out.zero_() if "empty" in str(func) else out

    def _into_real(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """An in-place op writing meta values into a real tensor: checked on meta, values assumed kept."""
        self._meta(func, args, kwargs)  # moves what it needs to meta (a boolean index first resolved)
        self.log.add(_name(func), "a real tensor written from meta values keeps its values")
        return args[0]

    def _meta(self, func: Any, args: tuple, kwargs: dict) -> Any:
        if func in (aten.index.Tensor, aten.index_put_.default, aten.index_put.default):
            indices: list = []
            for index in args[1]:
                index = _bool_index(index, self.log)
                indices.extend(index if isinstance(index, tuple) else (index,))
            args = (args[0], indices, *args[2:])
        has_real = any(is_real(t) for t in _flat_tensors(args, kwargs))
        margs, mkwargs = _flat_map(_to_meta, args, kwargs) if has_real else (args, kwargs)
        try:
            return self._memoized(func, margs, mkwargs)
        except NotImplementedError as exc:
            if "nonzero" not in str(exc) and "data-dependent" not in str(exc):
                raise
            return self._assumed(func, args, kwargs)
        except RuntimeError as exc:
            retried = self._other_dtype(func, margs, mkwargs, exc)
            if retried is None:
                raise
            return retried

    def _assumed(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """A data-dependent op on meta values (nonzero, masked_select...): run on typical values."""
        metas = [x for x in tree_flatten((args, kwargs))[0] if _is_meta(x)]
        self.log.add(_name(func), _read_text(metas[0]))
        rargs, rkwargs = tree_map(lambda x: _typical(x) if _is_meta(x) else x, (args, kwargs))
        out = func(*rargs, **rkwargs)
        return tree_map(lambda x: _to_meta(x) if is_real(x) and not _carries_values(x.dtype) else x, out)

    def _other_dtype(self, func: Any, args: tuple, kwargs: dict, exc: BaseException) -> Any:
        """A meta kernel that rejects a reduced dtype all floating operands share: a gap of meta."""
        floats = {x.dtype for x in tree_flatten((args, kwargs))[0] if _is_meta(x) and x.is_floating_point()}
        if len(floats) != 1 or "dtype" not in str(exc).lower():
            return None
        (have,) = floats
        for other in (torch.bfloat16, torch.float32, torch.float16):
            if other == have:
                continue
            cast = tree_map(
                lambda x, o=other: x.to(o) if _is_meta(x) and x.is_floating_point() else x, (args, kwargs)
            )
            try:
                out = func(*cast[0], **cast[1])
            except RuntimeError:
                continue
            self.log.add(
                _name(func), f"its meta kernel rejects {dtype_name(have)}; checked as if it accepts it"
            )
            return tree_map(lambda x: x.to(have) if _is_meta(x) and x.is_floating_point() else x, out)
        return None


class Recording:
    """The ops under one torch call: whether any wrote into a tensor, and the meta tensors pure ops
    made (held, so that no other tensor takes their id meanwhile)."""

    __slots__ = ("made", "wrote")

    def __init__(self) -> None:
        self.made: dict[int, torch.Tensor] = {}
        self.wrote = False

    def saw(self, func: Any, out: Any) -> None:
        if func._schema.is_mutable:
            self.wrote = True
        elif _is_pure(func):
            for t in out if type(out) is tuple or type(out) is list else (out,):
                if type(t) is torch.Tensor and t.is_meta:
                    self.made[id(t)] = t

    def fresh(self, out: Any) -> bool:
        """Whether `out` (a tensor, or a tuple/list of them) is only tensors pure ops made, and no op wrote."""
        if self.wrote:
            return False
        outs = out if type(out) is tuple or type(out) is list else (out,)
        return bool(outs) and all(self.made.get(id(t)) is t for t in outs)


def _read_text(t: torch.Tensor) -> str:
    shape = "x".join(map(str, t.shape)) or "scalar"
    typical = "True (finite, all set)" if t.dtype == torch.bool else "1"
    return f"read the value of a {dtype_name(t.dtype)} {shape} computed on meta: assumed {typical}"


def _bool_index(index: Any, log: Log) -> Any:
    """A boolean index selects a data-dependent number of rows: turn it into integer indices."""
    if not isinstance(index, torch.Tensor) or index.dtype not in (torch.bool, torch.uint8):
        return index
    if index.is_meta:
        log.add("boolean indexing", _read_text(index))
        index = _typical(index)
    return index.nonzero().unbind(1) if index.dim() > 1 else index.nonzero().squeeze(1)


def _mutated(func: Any, args: tuple, kwargs: dict) -> list[torch.Tensor]:
    out = []
    for i, arg in enumerate(func._schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        value = args[i] if i < len(args) else kwargs.get(arg.name)
        if isinstance(value, torch.Tensor):
            out.append(value)
    return out
