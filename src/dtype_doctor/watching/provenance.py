"""Where each tensor got its dtype: tags kept beside the tensors, frames resolved lazily.

A Tag is attached (by identity, weakly: tensor `==` breaks WeakKeyDictionary) to
tensors whose dtype was decided at a known place: a model input, a creation op, a cast,
a promotion. An op whose output keeps the dtype of an input shares that input's Tag,
so tags are few and cheap. Frames are walked with sys._getframe (traceback is 10× slower)
and kept as (code, line) pairs until a finding needs their file names.
"""

from __future__ import annotations

import functools
import os
import sys
import sysconfig
import weakref
from types import CodeType
from typing import Any

import torch

from ..dtypes import canonical
from ..report import Origin

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
TOOL_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # dtype_doctor/
_LIB_DIRS = tuple(
    {
        p + os.sep
        for key in ("purelib", "platlib", "stdlib", "platstdlib")
        if (p := sysconfig.get_paths().get(key))
    }
)

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
        if name.startswith((_TORCH_DIR, TOOL_DIR)):
            kind = SKIP
        elif name.startswith(_LIB_DIRS) or name.startswith("<frozen") or "site-packages" in name:
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


class Tag:
    """How a tensor got its dtype. kind: input | op | cast | promotion | parameter | buffer."""

    __slots__ = ("dtype", "frame", "kind", "module", "name", "op", "parents", "user")

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
        self.dtype = dtype
        self.op = op
        self.name = name
        self.module = module
        self.frame = frame
        self.user = user
        self.parents = parents


_NAME, _MODULE = Tag.name, Tag.module  # the slots a ParamTag fills when first read


class ParamTag(Tag):
    """The tag of a parameter, named (qualified name, owner module) only when a finding reads it:
    naming walks the model, which a forward that finds nothing should not pay for."""

    __slots__ = ("_names", "_ref")

    def __init__(self, names: Any, t: torch.Tensor, dtype: torch.dtype) -> None:
        self.kind = "parameter"
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


class _Ref(weakref.ref):
    """A weak reference to a tagged tensor that carries its tag: one object per tagged tensor."""

    __slots__ = ("key", "tag")


class Provenance:
    """Tags by tensor identity, dropped with the tensor.

    The semantics of torch.utils.weak.WeakIdKeyDictionary (identity keys: tensor `==` breaks
    weakref.WeakKeyDictionary), without building a WeakIdRef on every lookup: a lookup here
    is id() + dict.get + a ref call, ~20× cheaper, and it runs on every torch call. The tag
    rides on the weak reference itself, so tagging a tensor allocates one object.
    """

    def __init__(self) -> None:
        self._data: dict[int, _Ref] = {}
        data = self._data

        def drop(ref: _Ref) -> None:
            if data.get(ref.key) is ref:
                del data[ref.key]

        self._drop = drop

    def get(self, t: torch.Tensor) -> Tag | None:
        ref = self._data.get(id(t))
        if ref is not None and ref() is t:
            return ref.tag
        return None

    def lookup(self, t: torch.Tensor) -> Tag | None:
        """The tag of `t`, or of the tensor it is a view of (views are not tagged: too many)."""
        ref = self._data.get(id(t))
        if ref is not None and ref() is t:
            return ref.tag
        base = t._base
        if base is not None:
            ref = self._data.get(id(base))
            if ref is not None and ref() is base:
                return ref.tag
        return None

    def set(self, t: torch.Tensor, tag: Tag) -> None:
        key = id(t)
        ref = self._data.get(key)
        if ref is not None and ref() is t:
            ref.tag = tag
            return
        ref = _Ref(t, self._drop)
        ref.key = key
        ref.tag = tag
        self._data[key] = ref

    def __len__(self) -> int:
        return len(self._data)


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
    if tag.user is not None and tag.user != tag.frame:
        ufile, uline, _ = where(tag.user)
        origin.chain.append(Origin(kind="call", name="your code", file=ufile, line=uline))
    if depth < 4:
        origin.chain.extend(tag_to_origin(p, name_of, depth + 1) for p in tag.parents)
    return origin
