"""The TorchFunctionMode: sees every torch call, checks contracts before the op runs,
tags outputs after it. Kept lean: property getters (16 % of calls) return at once and
each function is classified once.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
from torch.overrides import TorchFunctionMode

from ..errors import DtypeMismatchError
from .compiled import compiling
from .contracts import CONTRACTS, Contract

Tensor = torch.Tensor
_any_autocast = getattr(torch._C, "_is_any_autocast_enabled", lambda: True)
# contract rules that never object when every tensor operand has one dtype ("list" too, outside
# autocast); any other rule (integer indices, a rule registered later) judges every call
_ONE_DTYPE_PASSES = frozenset({"same", "indexed", "norm", "attention", "setitem"})


class Watcher(Protocol):
    """What the mode calls back (watch.session.Session); a protocol, so mode.py imports no session."""

    def internal_error(self, exc: BaseException) -> None: ...
    def tag_copy(self, src: Any, out: torch.Tensor) -> None: ...
    def check_contract(self, func: Any, c: Contract, args: tuple, kwargs: dict) -> tuple: ...
    def scan(self, func: Any, kind: Any, args: tuple, kwargs: dict) -> tuple: ...
    def tag(self, func: Any, kind: Any, inputs: Any, out: Any) -> None: ...
    def on_failure(
        self, exc: BaseException, func: Any, kind: Any, args: tuple, kwargs: dict, finding: Any
    ) -> None: ...


_GETTER = type(torch.Tensor.dtype.__get__)


class Generic:
    """A call with no contract: watched for silent promotion, outputs tagged."""

    __slots__ = ("inplace", "name", "promotes")

    def __init__(self, name: str, inplace: bool, promotes: bool) -> None:
        self.name = name
        self.inplace = inplace
        self.promotes = promotes


PASS = object()  # calls that make no floating tensor worth tagging
VIEW = object()  # views share their base's origin (looked up through ._base): nothing to do
CAST = object()  # dtype conversions: a new origin when the dtype changes

_VIEW_NAMES = {
    "view", "view_as", "permute", "transpose", "t", "split", "chunk", "unbind", "__getitem__",
    "expand", "expand_as", "unsqueeze", "squeeze", "narrow", "select", "movedim", "swapaxes",
    "swapdims", "unflatten", "split_with_sizes", "tensor_split", "diagonal", "as_strided", "unfold",
}  # fmt: skip
_CAST_NAMES = {"to", "float", "half", "bfloat16", "double", "type", "type_as"}
_PASS_NAMES = {
    "__repr__", "__format__", "__str__", "__len__", "__bool__", "__int__", "__float__", "__index__",
    "__hash__", "__iter__", "__contains__", "__reduce_ex__", "__deepcopy__", "__array__", "numpy",
    "tolist", "item", "dim", "size", "stride", "numel", "is_floating_point", "is_complex",
    "element_size", "data_ptr", "backward", "register_hook", "storage", "untyped_storage",
    "requires_grad_", "retain_grad", "get_device", "is_contiguous", "nelement", "ndimension",
    "__setstate__", "__getstate__", "_backward_hooks", "grad_fn", "__dlpack__",
}  # fmt: skip
# mixing dtypes here is harmless: the result takes one operand's dtype on purpose
_NO_PROMOTION = {
    "copy_", "expand_as", "view_as", "reshape_as", "new_zeros", "new_ones", "new_empty", "new_full",
    "new_tensor", "masked_fill", "masked_fill_", "set_", "__setitem__", "where_",
    "allclose", "isclose", "equal", "eq", "ne", "lt", "le", "gt", "ge",
    "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "sort", "argsort", "searchsorted",
    "bucketize", "index_select", "gather", "take_along_dim", "embedding",
}  # fmt: skip


def classify(func: Any) -> Any:
    contract = CONTRACTS.get(func)
    if contract is not None:
        return contract
    name = getattr(func, "__name__", "") or ""
    if name in _CAST_NAMES:
        return CAST
    if name in _VIEW_NAMES:
        return VIEW
    if name in _PASS_NAMES or name.startswith(("_foreach", "is_", "_is_", "_has_")):
        return PASS
    inplace = (name.endswith("_") and not name.endswith("__")) or name.startswith("__i")
    return Generic(name, inplace, not inplace and name not in _NO_PROMOTION)


class WatchMode(TorchFunctionMode):
    def __init__(self, session: Watcher) -> None:
        super().__init__()
        self.session = session
        self.kinds: dict[Any, Any] = {}
        self._tag_uniform = session._tagger.tag_uniform  # type: ignore[attr-defined]
        self._tag_one = session._tagger.tag_one  # type: ignore[attr-defined]

    def _classify(self, func: Any) -> Any:
        try:
            return classify(func)
        except Exception as exc:  # an exotic callable: let it through unwatched
            self.session.internal_error(exc)
            return PASS

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        # a getter; dynamo tracing this (it must see the op only); or a worker thread's mode left
        # pushed when its session stopped mid-call (the session's hooks are gone): pass through
        if type(func) is _GETTER or compiling() or not self.session._active:
            return func(*args, **kwargs) if kwargs else func(*args)
        try:
            kind = self.kinds[func]
        except KeyError:
            kind = self.kinds[func] = self._classify(func)
        except TypeError:  # an unhashable callable: classify it every time
            kind = self._classify(func)
        if kind is PASS:
            return func(*args, **kwargs) if kwargs else func(*args)
        if kind is VIEW:
            out = func(*args, **kwargs) if kwargs else func(*args)
            if type(out) is Tensor and out._base is None and args and out is not args[0]:
                self.session.tag_copy(args[0], out)  # advanced indexing copies: keep the origin
            return out
        # the common case costs one pass over the operands: every tensor in one dtype, and no rule
        # that judges more than dtypes (a pure rule cannot fail then, nor can a silent promotion)
        first = None  # the first floating operand; `floats` only when there are more (no list per call)
        floats: list | None = None
        dt = None
        mixed = False
        for a in (*args, *kwargs.values()) if kwargs else args:
            if isinstance(a, Tensor):
                items: Any = (a,)
            elif type(a) is list or type(a) is tuple:
                items = a  # torch.cat's list
            else:
                continue
            for x in items:
                if isinstance(x, Tensor):
                    d = x.dtype
                    if dt is None:
                        dt = d
                    elif d is not dt:
                        mixed = True
                    if d.is_floating_point:
                        if first is None:
                            first = x
                        elif floats is None:
                            floats = [first, x]
                        else:
                            floats.append(x)
        if kwargs is None:
            kwargs = {}
        s = self.session
        if (
            not mixed
            and kind is not CAST
            and (
                type(kind) is Generic
                or kind.rule in _ONE_DTYPE_PASSES
                or (kind.rule == "list" and not _any_autocast())
            )
        ):
            try:
                out = func(*args, **kwargs)
            except Exception as exc:
                s.on_failure(exc, func, kind, args, kwargs, None)
                raise
            try:
                if floats is None:
                    self._tag_one(func, kind, first, out)
                else:
                    self._tag_uniform(func, kind, floats, out)
            except Exception as exc:
                s.internal_error(exc)
            return out
        inputs = None
        finding = None
        try:
            if type(kind) is Contract:
                args, kwargs, inputs, finding = s.check_contract(func, kind, args, kwargs)
            else:
                args, kwargs, inputs, finding = s.scan(func, kind, args, kwargs)
        except DtypeMismatchError:
            raise
        except Exception as exc:
            s.internal_error(exc)
        try:
            out = func(*args, **kwargs)
        except Exception as exc:
            s.on_failure(exc, func, kind, args, kwargs, finding)
            raise
        if inputs is not None:
            try:
                s.tag(func, kind, inputs, out)
            except Exception as exc:
                s.internal_error(exc)
        return out
