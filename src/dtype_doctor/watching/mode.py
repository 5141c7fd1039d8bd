"""The TorchFunctionMode: sees every torch call, checks contracts before the op runs,
tags outputs after it. Kept lean: property getters (16 % of calls) return at once and
each function is classified once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import torch
from torch.overrides import TorchFunctionMode

from ..compile_state import compiler_flags, is_dynamo_compiling
from ..errors import DtypeMismatchError
from ..tracing.casts import INHERITING, TENSOR_CASTS
from ..tracing.inplace import in_place
from .contracts import CONTRACTS, Contract

Tensor = torch.Tensor
Parameter = torch.nn.Parameter
# isinstance(x, Tensor) costs 0.2 µs for anything not exactly a Tensor (its metaclass's check
# runs): the argument types that never are one are told by type first
_SCALARS = frozenset(
    {int, float, bool, str, type(None), dict, slice, type(...), torch.dtype, torch.Size, torch.device,
     torch.memory_format, torch.layout}
)  # fmt: skip
_any_autocast = getattr(torch._C, "_is_any_autocast_enabled", lambda: True)
# contract rules that never object when every tensor operand has one dtype ("list" too, outside
# autocast); any other rule (integer indices, attention's backend restriction, a rule registered
# later) judges every call
_ONE_DTYPE_PASSES = frozenset({"same", "indexed", "norm", "setitem"})


class Judge(Protocol):
    """What the mode hands a call it does not pass straight through (op_judge.OpJudge)."""

    def check_contract(self, func: Any, c: Contract, args: tuple, kwargs: dict) -> tuple: ...
    def scan(self, func: Any, kind: Any, args: tuple, kwargs: dict) -> tuple: ...
    def tag(self, func: Any, kind: Any, inputs: Any, out: Any) -> None: ...
    def tag_copy(self, src: Any, out: torch.Tensor) -> None: ...
    def on_failure(
        self, exc: BaseException, func: Any, kind: Any, args: tuple, kwargs: dict, finding: Any
    ) -> None: ...


class Watcher(Protocol):
    """What the mode reads off the session (session.Session); protocols, so mode.py imports neither."""

    @property
    def judge(self) -> Judge: ...

    tagger: Any
    prov: Any
    call_state: Any  # .lazy: a clean call's repeat
    active: bool

    def internal_error(self, exc: BaseException) -> None: ...
    def rebound(self, target: Any, value: Any) -> None: ...


_GETTER = type(torch.Tensor.dtype.__get__)
_DATA_SETTER = torch.Tensor.data.__set__  # `param.data = t`: how a module-wide cast converts a parameter


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
    if isinstance(func, torch._ops.OpOverload) and func.namespace in ("aten", "prims"):
        return PASS  # an aten op: a compiled graph (aot_eager) calls these through Python; an extension's is the user's
    name = getattr(func, "__name__", "") or ""
    if name in TENSOR_CASTS:
        return CAST
    if name in _VIEW_NAMES:
        return VIEW
    if name in _PASS_NAMES or name.startswith(("_foreach", "is_", "_is_", "_has_")):
        return PASS
    inplace = in_place(name)[1]
    return Generic(name, inplace, not inplace and name not in _NO_PROMOTION and not _returns_a_view(name))


def _returns_a_view(name: str) -> bool:
    """The aten op of that name returns a view of an operand (`Tensor(a)` in its schema: a nested
    tensor made from its values and metadata tensors): it computes nothing, so nothing promotes."""
    packet = (
        getattr(torch.ops.aten, name, None) if name.isidentifier() and not name.startswith("__") else None
    )
    try:
        overload = packet.default if packet is not None else None
    except AttributeError:
        return False
    returns = getattr(getattr(overload, "_schema", None), "returns", ())
    return bool(returns) and returns[0].alias_info is not None and not returns[0].alias_info.is_write


# what a call of a function needs, looked up once per function for every session; the kind itself
# (Contract, Generic, CAST) is only read off the common path
_PASS_THROUGH = 0  # getters, sizes, hooks: nothing to check or tag
_VIEWS = 1  # views share their base's origin
_TAG = 2  # operands in one dtype: nothing can fail, the output is only tagged
_TAG_OUTSIDE_AUTOCAST = 3  # a list rule: as _TAG, except under autocast
# ops that take dtype= to compute in a wider dtype: under autocast, left in its dtype, each is the
# last place the region's tensor could be asked for in float32 (log_softmax before a loss)
TAKES_DTYPE = frozenset({"softmax", "log_softmax", "cumsum", "cumprod"})
_JUDGE = 4  # casts (a new origin when the dtype changes), rules that judge more than dtypes
_REBIND = 5  # `param.data = t`: the parameter takes t's dtype where t was made
_CODES: dict[Any, int] = {}
_KINDS: dict[Any, Any] = {}
_CLASSIFIED_BY: list = [None]  # (classify, number of contracts) the two tables were filled by


def _fresh_tables() -> None:
    """Forget the classifications when contracts were registered or removed since (or classify
    itself was replaced)."""
    by = (classify, len(CONTRACTS))
    if _CLASSIFIED_BY[0] != by:
        _CODES.clear()
        _KINDS.clear()
        _CLASSIFIED_BY[0] = by


def _code_of(kind: Any) -> int:
    if kind is PASS:
        return _PASS_THROUGH
    if kind is VIEW:
        return _VIEWS
    if type(kind) is Generic:
        return _TAG
    if type(kind) is Contract:
        if kind.rule in _ONE_DTYPE_PASSES:
            return _TAG
        if kind.rule == "list":
            return _TAG_OUTSIDE_AUTOCAST
    return _JUDGE


def _classified(func: Any, on_error: Any) -> int:
    """The code of `func`, its kind kept in _KINDS (an unhashable callable: classified each call)."""
    try:
        kind = PASS if type(func) is _GETTER else classify(func)
    except Exception as exc:  # an exotic callable: let it through unwatched
        on_error(exc)
        kind = PASS
    code = _REBIND if kind is PASS and func == _DATA_SETTER else _code_of(kind)
    if code is _TAG and getattr(func, "__name__", None) in TAKES_DTYPE:
        code = _TAG_OUTSIDE_AUTOCAST  # under autocast its output dtype is a birth (tagging.py)
    elif code is _TAG and getattr(func, "__name__", None) in INHERITING:
        code = _JUDGE  # `x.new_empty(n)`: the new tensor's own origin, x's as its parent (tagging.py)
    try:
        _KINDS[func] = kind
        _CODES[func] = code
    except TypeError:
        pass
    return code


def _kind(func: Any) -> Any:
    kind = _KINDS.get(func) if func.__hash__ is not None else None
    return kind if kind is not None else classify(func)


def _operands(args: tuple, kwargs: dict | None) -> tuple[Any, list | None, Any, bool]:
    """(first floating tensor, all floating tensors when more than one, the first tensor's dtype,
    whether the tensors' dtypes differ) over every tensor operand, lists included (torch.cat's)."""
    first = None
    floats: list | None = None
    dt = None
    mixed = False
    for a in (*args, *kwargs.values()) if kwargs else args:
        if isinstance(a, Tensor):
            items: Any = (a,)
        elif type(a) is list or type(a) is tuple:
            items = a
        else:
            continue
        for x in items:
            if isinstance(x, Tensor):
                d = x.dtype
                if dt is None:
                    dt = d
                elif d is not dt:
                    mixed = True
                if d.is_floating_point or d.is_complex:  # a spectrum carries its signal's origin
                    if first is None:
                        first = x
                    elif floats is None:
                        floats = [first, x]
                    else:
                        floats.append(x)
    return first, floats, dt, mixed


class WatchMode(TorchFunctionMode):
    def __init__(self, session: Watcher) -> None:
        super().__init__()
        _fresh_tables()
        self.session = session
        # bound once: each call goes straight to the session's judge, tagger and provenance
        judge = session.judge
        self._check_contract = judge.check_contract
        self._scan = judge.scan
        self._tag = judge.tag
        self._tag_copy = judge.tag_copy
        self._on_failure = judge.on_failure
        self._internal_error = session.internal_error
        self._rebound = session.rebound
        self._tag_untagged = session.tagger.tag_untagged
        self._share = session.prov.share
        self._lookup = session.prov.lookup
        self._call = session.call_state  # .lazy: a clean call's repeat
        # runs an op instead of calling it (check's dry run: a repeated call answered from a memo)
        self._run: Callable[[Any, tuple, dict], Any] | None = None

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if is_dynamo_compiling():
            # dynamo traces this method: it must see the op only, never read the tables (it would
            # guard on their size and recompile each time they grow)
            return func(*args, **kwargs) if kwargs else func(*args)
        try:
            code = _CODES[func]
        except (KeyError, TypeError):
            code = _classified(func, self._internal_error)
        if code is _PASS_THROUGH:  # a getter, a size: nothing to see
            return func(*args, **kwargs) if kwargs else func(*args)
        if code is _REBIND:
            out = func(*args, **kwargs) if kwargs else func(*args)
            if len(args) == 2:
                self._rebound(args[0], args[1])
            return out
        if self._call.lazy:
            # a repeat of a root call seen clean (clean_calls): only what is new is looked at, an op
            # whose tensors are in several dtypes or whose rule judges more; the rest runs as is
            if code is _VIEWS:
                return func(*args, **kwargs) if kwargs else func(*args)
            dt = None
            for a in (*args, *kwargs.values()) if kwargs else args:
                cls = type(a)
                if cls is Tensor or cls is Parameter:
                    if a.dtype is not dt:
                        if dt is not None:
                            break
                        dt = a.dtype
                elif cls in _SCALARS:
                    continue
                elif cls is list or cls is tuple:
                    if a and type(a[0]) is not int:
                        break  # torch.cat's list: the full path
                elif isinstance(a, Tensor):
                    break  # a subclass: the full path
            else:
                if code is _TAG or (code is _TAG_OUTSIDE_AUTOCAST and not _any_autocast()):
                    try:
                        if self._run:  # check's dry run (FrontedMode)
                            return self._run(func, args, kwargs or {})
                        return func(*args, **kwargs) if kwargs else func(*args)
                    except Exception as exc:
                        self._on_failure(exc, func, _kind(func), args, kwargs or {}, None)
                        raise
        # compiling (export, AOT), or a worker thread's mode left pushed when its session stopped
        # mid-call: pass through
        if compiler_flags._is_compiling_flag or not self.session.active:
            return func(*args, **kwargs) if kwargs else func(*args)
        if code is _VIEWS:
            out = func(*args, **kwargs) if kwargs else func(*args)
            if type(out) is Tensor and out._base is None and args and out is not args[0]:
                self._tag_copy(args[0], out)  # advanced indexing copies: keep the origin
            return out
        # the common case costs one pass over the operands: tensors all in one dtype, and no rule
        # that judges more than dtypes (a pure rule cannot fail then, nor a silent promotion)
        first = None  # the first floating operand
        floats = None  # every floating operand, when there are several
        dt = None
        mixed = False
        for a in (*args, *kwargs.values()) if kwargs else args:
            cls = type(a)
            if (
                cls is Tensor
                or cls is Parameter
                or (cls not in _SCALARS and cls is not list and cls is not tuple and isinstance(a, Tensor))
            ):
                d = a.dtype
                if d is dt:
                    if first is not None:
                        if floats is None:
                            floats = [first, a]
                        else:
                            floats.append(a)
                elif dt is None:
                    dt = d
                    if d.is_floating_point or d.is_complex:
                        first = a
                else:
                    mixed = True
                    break
            elif (cls is list or cls is tuple) and a and type(a[0]) is not int:
                first, floats, dt, mixed = _operands(args, kwargs)  # torch.cat's list: the full pass
                break
        if mixed or (code is not _TAG and (code is _JUDGE or _any_autocast())):
            return self._judged(func, _kind(func), args, kwargs or {})
        try:
            if self._run:
                out = self._run(func, args, kwargs or {})
            else:
                out = func(*args, **kwargs) if kwargs else func(*args)
        except Exception as exc:
            self._on_failure(exc, func, _kind(func), args, kwargs or {}, None)
            raise
        if self._call.lazy:
            return out  # no origins inside a repeat of a clean call
        # an output in its operands' dtype shares their origin: a lookup each, one store
        if (
            type(out) is Tensor
            and first is not None
            and out.dtype is dt
            and (
                (out._base is not None and self._lookup(out) is not None)
                or self._share(first if floats is None else floats, out)
            )
        ):
            # a view of a tagged tensor (looked up through its base), or tagged; a view of the op's
            # own temporary (F.linear of a 3-d input) is tagged itself: its base is never seen
            return out
        try:
            inputs = floats if floats is not None else [first] if first is not None else []
            self._tag_untagged(func, _kind(func), inputs, out)
        except Exception as exc:
            self._internal_error(exc)
        return out

    def _judged(self, func: Any, kind: Any, args: tuple, kwargs: dict) -> Any:
        """A call with operands in several dtypes, a cast, or a rule that judges more than dtypes."""
        inputs = None
        finding = None
        try:
            if type(kind) is Contract:
                args, kwargs, inputs, finding = self._check_contract(func, kind, args, kwargs)
            else:
                args, kwargs, inputs, finding = self._scan(func, kind, args, kwargs)
        except DtypeMismatchError:
            raise
        except Exception as exc:
            self._internal_error(exc)
        try:
            out = self._run(func, args, kwargs) if self._run else func(*args, **kwargs)
        except Exception as exc:
            self._on_failure(exc, func, kind, args, kwargs, finding)
            raise
        if inputs is not None and not self._call.lazy:
            try:
                self._tag(func, kind, inputs, out)
            except Exception as exc:
                self._internal_error(exc)
        return out


# front(watched, func, args, kwargs) -> output; watched(func, args, kwargs) is the watch's own handling
Front = Callable[[Callable[[Any, tuple, dict], Any], Any, tuple, dict], Any]


class FrontedMode(WatchMode):
    """The watch, with a few functions handed to a front first (check's hybrid: attention run all on
    meta, integer tensors made on CPU), and each op it judged or tagged run by `run`. A call more for
    those: a TorchFunctionMode of the front's own in front of the watch, or one under it that runs
    the ops, would cost every torch call ~3 µs instead, the watch's own getters included."""

    def __init__(
        self, session: Watcher, fronts: Mapping[Any, Front], run: Callable[[Any, tuple, dict], Any] | None
    ) -> None:
        super().__init__(session)
        self._fronts = fronts
        self._run = run

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        try:
            front = self._fronts.get(func)
        except TypeError:  # an unhashable callable
            front = None
        if front is None:
            return WatchMode.__torch_function__(self, func, types, args, kwargs)
        return front(
            lambda f, a, k: WatchMode.__torch_function__(self, f, types, a, k), func, args, kwargs or {}
        )
