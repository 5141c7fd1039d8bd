"""Where each tensor got its dtype: tags kept beside the tensors, frames resolved lazily.

A Tag is attached (by identity, weakly: tensor `==` breaks WeakKeyDictionary) to
tensors whose dtype was decided at a known place: a model input, a creation op, a cast,
a promotion. An op whose output keeps the dtype of an input shares that input's Tag,
so tags are few and cheap. Frames are walked with sys._getframe (traceback is 10× slower)
and kept as (code, line) pairs until a finding needs their file names.
"""

from __future__ import annotations

import functools
import gc
import os
import sys
import weakref
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

import torch

from ..dtypes import canonical
from ..report import Origin
from ..tracing.files import TOOL_DIR, TORCH_DIR, library_file

SKIP, LIBRARY, USER = 0, 1, 2
# by id(code): hashing a code object hashes its bytecode and constants (~0.7 µs for a long
# forward, on every frame of every walk); the code objects are kept, so their ids stay theirs
_kinds: dict[int, int] = {}
_kept: list[CodeType] = []

Frame = tuple[CodeType, int]


def frame_kind(code: CodeType) -> int:
    kind = _kinds.get(id(code))
    if kind is None:
        name = code.co_filename
        if name.startswith((TORCH_DIR, TOOL_DIR, "<eval_with_key>")):  # the last: torch.fx's code
            kind = SKIP
        elif library_file(name):
            kind = LIBRARY
        else:
            kind = USER
        _kinds[id(code)] = kind
        _kept.append(code)
    return kind


def caller_frames(depth: int = 2) -> tuple[Frame | None, Frame | None]:
    """(innermost frame outside torch and this tool, innermost frame in the user's own code)."""
    try:
        f = sys._getframe(depth)
    except ValueError:
        return None, None
    inner = None
    while f is not None:
        code = f.f_code
        kind = _kinds.get(id(code))
        if kind is None:
            kind = frame_kind(code)
        if kind:
            if inner is None:
                inner = (code, f.f_lineno)
            if kind == USER:
                return inner, (code, f.f_lineno)
        f = f.f_back
    return inner, None


def outermost_user_frame(depth: int = 2) -> Frame | None:
    """The outermost frame in the user's own code: the statement of the script that led here (a
    model built or converted inside a helper of yours is born, for you, where you called it)."""
    try:
        f = sys._getframe(depth)
    except ValueError:
        return None
    found = None
    for _ in range(512):
        if f is None:
            break
        if frame_kind(f.f_code) == USER and not f.f_code.co_filename.startswith("<"):
            found = (f.f_code, f.f_lineno)  # a file of yours (not exec'd text: no line to show)
        f = f.f_back
    return found


def code_span(frame: FrameType) -> tuple[str, int, int, str]:
    """(file as reports show it, first line, last line, "function (file:line)") of the function a
    frame runs: a fix placed between those lines is pasted inside that function."""
    code = frame.f_code
    last = max((line for _, _, line in code.co_lines() if line), default=code.co_firstlineno)
    where = f"{code.co_name} ({code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno})"
    return short_path(code.co_filename), code.co_firstlineno, last, where


def short_path(path: str) -> str:
    """site-packages/diffusers/x.py → diffusers/x.py; files under the cwd relative to it."""
    try:
        cwd = os.getcwd()
    except OSError:  # the working directory was removed
        return path
    return _short_path(path, cwd)


@functools.lru_cache(maxsize=4096)
def _short_path(path: str, cwd: str) -> str:
    for marker in ("site-packages" + os.sep, "dist-packages" + os.sep):
        i = path.rfind(marker)
        if i >= 0:
            return path[i + len(marker) :]
    try:
        rel = os.path.relpath(path, cwd)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def where(frame: Frame | None) -> tuple[str | None, int | None, str | None]:
    if frame is None:
        return None, None, None
    code, line = frame
    return short_path(code.co_filename), line, code.co_name


# which origin an output shares when several operands in its dtype have one: a model input beats
# a parameter or buffer beats an op
RANKS = {"input": 0, "output": 0, "parameter": 1, "buffer": 1, "op": 2}


class Tag:
    """How a tensor got its dtype. kind: input | op | cast | promotion | parameter | buffer."""

    __slots__ = ("dtype", "frame", "kind", "module", "name", "op", "parents", "rank", "region", "user")

    def __init__(
        self,
        kind: str,
        dtype: torch.dtype,
        op: str | None = None,
        name: str | None = None,
        module: Any = None,
        frame: Frame | None = None,
        user: Frame | None = None,
        parents: tuple[Tag, ...] = (),
    ) -> None:
        self.kind = kind
        self.rank = RANKS.get(kind, 1)
        self.dtype = dtype
        self.op = op
        self.name = name
        self.module = module
        self.frame = frame
        self.user = user
        self.parents = parents
        self.region: tuple[Frame, str] | None = None  # autocast chose the dtype: its `with` (frame, text)


_NAME, _MODULE = Tag.name, Tag.module  # the slots a ParamTag fills when first read


class ParamTag(Tag):
    """The tag of a parameter, named (qualified name, owner module) only when a finding reads it:
    naming walks the model, which a forward that finds nothing should not pay for."""

    __slots__ = ("_names", "_ref")

    def __init__(self, names: Any, t: torch.Tensor, dtype: torch.dtype) -> None:
        self.kind = "parameter"
        self.rank = 1
        self.dtype = dtype
        self.op = None
        self.frame = None
        self.user = None
        self.parents = ()
        self._names = names
        self._ref = weakref.ref(t)

    def _resolve(self) -> None:
        names, self._names = self._names, None
        t = self._ref()
        known = names.tensor(t) if t is not None else None
        kind, qual, owner = known if known is not None else ("parameter", None, None)
        self.kind = kind
        _NAME.__set__(self, qual)
        _MODULE.__set__(self, owner)

    @property
    def name(self) -> str | None:  # type: ignore[override]
        if self._names is not None:
            self._resolve()
        return _NAME.__get__(self)

    @property
    def module(self) -> Any:  # type: ignore[override]
        if self._names is not None:
            self._resolve()
        return _MODULE.__get__(self)


def qualified_op_name(func: Any) -> str:
    """The name the user reads for a torch function: `Tensor.mm`, `F.linear`, `torch.mm`."""
    name = getattr(func, "__name__", None) or repr(func)
    owner = getattr(func, "__objclass__", None) or getattr(func, "__self__", None)
    mod = getattr(func, "__module__", None) or ""
    if owner is not None and isinstance(owner, type) and issubclass(owner, torch._C.TensorBase):
        return f"Tensor.{name}"
    if mod.startswith("torch.nn.functional") or mod == "torch._C._nn":
        return f"F.{name}"
    if mod.startswith("torch.") and mod != "torch._C._VariableFunctions":
        return f"{mod}.{name}"
    return f"torch.{name}"


_ref = weakref.ref
_SWEEP_AT = 1024  # entries before the first sweep of dead tensors' tags


class Provenance:
    """Tags by tensor identity, forgotten some time after the tensor dies.

    The semantics of torch.utils.weak.WeakIdKeyDictionary (identity keys: tensor `==` breaks
    weakref.WeakKeyDictionary), at the cost of one (weakref, tag) pair per tagged tensor: no callback
    runs when a tensor dies (on a dispatch-bound forward that callback cost as much as the tagging);
    the entries of dead tensors are swept when the table doubles, so it stays within twice the tags
    alive. An id reused by a new tensor is told apart by the weak reference.
    """

    def __init__(self) -> None:
        self._data: dict[int, tuple[weakref.ref, Tag]] = {}
        self._sweep_at = _SWEEP_AT

    def lookup(self, t: torch.Tensor) -> Tag | None:
        """The tag of `t`, or of the tensor it is a view of (views are not tagged: too many)."""
        data = self._data
        entry = data.get(id(t))
        if entry is not None and entry[0]() is t:
            return entry[1]
        base = t._base
        if base is not None:
            entry = data.get(id(base))
            if entry is not None and entry[0]() is base:
                return entry[1]
        return None

    def set(self, t: torch.Tensor, tag: Tag) -> None:
        data = self._data
        data[id(t)] = (_ref(t), tag)
        if len(data) > self._sweep_at:
            self.sweep()

    def share(self, srcs: Any, out: torch.Tensor) -> bool:
        """Give `out`, made from `srcs` (a tensor or a list) in their dtype, the best-ranked of their
        tags (a model input beats a parameter beats an op; a view's is its base's). False when none
        of them has a tag: the caller decides then. The hot path: a lookup per operand, one store."""
        if type(srcs) is not list:
            srcs = (srcs,)
        data = self._data
        best = None
        for src in srcs:
            if out is src:
                return True  # in-place or returned as is: its origin stands
            entry = data.get(id(src))
            if entry is None or entry[0]() is not src:
                base = src._base
                if base is None:
                    continue
                entry = data.get(id(base))
                if entry is None or entry[0]() is not base:
                    continue
            if best is None or entry[1].rank < best.rank:
                best = entry[1]
        if best is None:
            return False
        data[id(out)] = (_ref(out), best)
        if len(data) > self._sweep_at:
            self.sweep()
        return True

    def sweep(self) -> None:
        """Forget the tags of dead tensors."""
        data = self._data
        try:  # no snapshot of the table (tracemalloc would count its tuples in the free list)
            dead = [key for key, entry in data.items() if entry[0]() is None]
        except RuntimeError:  # another thread tagged meanwhile: sweep next time
            return
        for key in dead:
            entry = data.get(key)
            if entry is not None and entry[0]() is None:
                del data[key]
        self._sweep_at = max(_SWEEP_AT, 2 * len(data))

    def sweep_on_gc(self) -> Callable[[], None]:
        """Sweep also after each full garbage collection; returns the undo."""
        callback = SweepAfterGC(self)
        gc.callbacks.append(callback)

        def undo() -> None:
            if callback in gc.callbacks:
                gc.callbacks.remove(callback)

        return undo

    def __len__(self) -> int:
        """The tags of live tensors (dead ones wait for the next sweep)."""
        return sum(1 for ref, _ in list(self._data.values()) if ref() is not None)


class SweepAfterGC:
    """A gc callback: dead tensors' tags go with each full collection. Python drops an exception
    raised in a gc callback: a signal landing in one is sent again (run.py, IN_CALLBACK)."""

    def __init__(self, prov: Provenance) -> None:
        self.prov = prov

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "stop" and info.get("generation") == 2:
            self.prov.sweep()


IN_CALLBACK = (SweepAfterGC.__call__.__code__, Provenance.sweep.__code__)


def tag_to_origin(tag: Tag, name_of: Any, depth: int = 0) -> Origin:
    file, line, _ = where(tag.frame)
    origin = Origin(
        kind=tag.kind,
        name=tag.name,
        op=tag.op,
        module=name_of(tag.module) if tag.module is not None else None,
        file=file,
        line=line,
        dtype=canonical(tag.dtype),
    )
    for frame in (tag.user, getattr(tag, "outer", None)):
        if frame is not None and frame != tag.frame and (frame is tag.user or frame != tag.user):
            ufile, uline, _ = where(frame)
            origin.chain.append(Origin(kind="call", name="your code", file=ufile, line=uline))
    region = getattr(tag, "region", None)
    if region is not None:  # autocast chose this dtype: the region that asked for it
        rfile, rline, _ = where(region[0])
        origin.chain.append(Origin(kind="call", name=f"inside `{region[1]}`", file=rfile, line=rline))
    if depth < 4:
        origin.chain.extend(tag_to_origin(p, name_of, depth + 1) for p in tag.parents)
    return origin
