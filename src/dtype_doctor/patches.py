"""Reference-counted method patches shared by every session (watch, numerics) that needs them.

Each session adds an `around(call_next, obj, *args, **kwargs)` handler; the first one installs a
single wrapper on the class, the last one to leave restores the original. Sessions may exit in
any order (or from other threads) without leaving the class patched for good or dropping
another session's handler.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

Around = Callable[..., Any]  # around(call_next, obj, *args, **kwargs)

_INHERITED = object()  # the class had no own attribute: restoring deletes ours
_lock = threading.Lock()
_patches: dict[tuple[type, str], _Patch] = {}


class _Patch:
    def __init__(self, cls: type, name: str) -> None:
        self.cls, self.name = cls, name
        self.original = cls.__dict__.get(name, _INHERITED)
        self.handlers: list[Around] = []
        target = getattr(cls, name)

        @functools.wraps(target)
        def wrapper(obj: Any, *args: Any, **kwargs: Any) -> Any:
            return self.call(list(self.handlers), target, obj, *args, **kwargs)

        self.wrapper = wrapper
        setattr(cls, name, wrapper)

    def call(self, handlers: list[Around], target: Any, obj: Any, *args: Any, **kwargs: Any) -> Any:
        if not handlers:
            return target(obj, *args, **kwargs)
        first, rest = handlers[0], handlers[1:]

        def call_next(o: Any, *a: Any, **k: Any) -> Any:
            return self.call(rest, target, o, *a, **k)

        return first(call_next, obj, *args, **kwargs)

    def restore(self) -> None:
        if self.cls.__dict__.get(self.name) is not self.wrapper:
            return  # someone patched on top of us: our wrapper stays, passing straight through
        if self.original is _INHERITED:
            delattr(self.cls, self.name)
        else:
            setattr(self.cls, self.name, self.original)


def patch_method(cls: type, name: str, around: Around) -> Callable[[], None]:
    """Add `around` to `cls.name`; returns the function that removes it (idempotent)."""
    key = (cls, name)
    with _lock:
        patch = _patches.get(key)
        if patch is None:
            patch = _patches[key] = _Patch(cls, name)
        patch.handlers.append(around)

    def release() -> None:
        with _lock:
            if around not in patch.handlers:
                return
            patch.handlers.remove(around)
            if not patch.handlers and _patches.get(key) is patch:
                patch.restore()
                del _patches[key]

    return release
