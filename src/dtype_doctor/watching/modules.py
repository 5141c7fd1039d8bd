"""The module path stack and qualified names of modules, parameters and buffers.

Global forward pre/post hooks (post with always_call=True, so a raising forward still
pops) keep the stack; names come from the roots' named_modules / named_parameters,
built only when a finding needs them.
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

from ..compile_state import compiler_flags, is_dynamo_compiling
from ..errors import DtypeMismatchError
from ..signatures import call_kwargs
from ..tensors import own_paths_collide

_no_torch_function = torch._C.DisableTorchFunction


def roots_of(model: Any) -> dict[str, nn.Module]:
    """prefix → root module, for a module, a diffusers-style pipeline (`.components`) or a dict."""
    if model is None:
        return {}
    if isinstance(model, nn.Module):
        return {"": model}
    comps = getattr(model, "components", None)
    if isinstance(model, dict):
        comps = model
    if isinstance(comps, dict):
        return {k: v for k, v in comps.items() if isinstance(v, nn.Module)}
    raise TypeError(f"watch(model=...) expects an nn.Module or a pipeline, got {type(model).__name__}")


class Names:
    """Qualified names relative to the known roots; rebuilt when a lookup misses."""

    def __init__(self, roots: dict[str, nn.Module]) -> None:
        self.roots = dict(roots)
        self._modules: dict[int, str] = {}
        self._tensors: dict[int, tuple[Any, str, str, nn.Module]] = {}
        self._objects: list[nn.Module] = []
        self._missed: set[int] = set()
        self._contained: set[int] = set()
        self._own_paths: set[str] = set()  # roots named by their own named_modules() paths
        self._built = False

    def add_root(self, module: nn.Module) -> None:
        """A module called from user code; names are paths in the OUTERMOST module the user holds
        (`llm.get_input_embeddings()(ids)` then `llm(...)`: `embed_tokens.weight`, not `Embedding.weight`)."""
        if id(module) in self._contained or any(r is module for r in self.roots.values()):
            return
        if any(module is m for r in self.roots.values() for m in r.modules()):
            self._contained.add(id(module))
            return
        inside = {id(m) for m in module.modules()}
        self.roots = {k: r for k, r in self.roots.items() if id(r) not in inside}
        self._contained.clear()
        key = "" if "" not in self.roots else type(module).__name__
        if key and not own_paths_collide(module, self.roots.values()):
            # a second model the script calls is named by its own named_modules() paths (what
            # `unet.get_submodule(...)` takes); its class prefixes them only where they would be
            # ambiguous with a model seen before (two text encoders of one config)
            key = f"{key}#{id(module)}"
            self._own_paths.add(key)
        self.roots[key] = module
        self._built = False
        self._missed.clear()

    def _build(self) -> None:
        self._modules.clear()
        self._tensors.clear()
        self._objects = []
        for key, root in self.roots.items():
            prefix = "" if key in self._own_paths else key
            for name, mod in root.named_modules(remove_duplicate=False):
                full = ".".join(p for p in (prefix, name) if p)
                if id(mod) not in self._modules:
                    self._modules[id(mod)] = full
                    self._objects.append(mod)
                for kind, table in (("parameter", mod._parameters), ("buffer", mod._buffers)):
                    for pname, t in table.items():
                        if t is not None:
                            self._tensors.setdefault(
                                id(t), (weakref.ref(t), kind, ".".join(p for p in (full, pname) if p), mod)
                            )
        self._built = True

    def module(self, module: nn.Module | None) -> str | None:
        if module is None:
            return None
        if not self._built:
            self._build()
        name = self._modules.get(id(module))
        if name is None:
            self._build()
            name = self._modules.get(id(module))
        return name if name is not None else type(module).__name__

    def ancestors(self, path: str) -> list[tuple[str, nn.Module]]:
        """(path, module) of the module at `path` and of each module above it, innermost first."""
        if not self._built:
            self._build()
        by_path = {name: mod for mod in self._objects for name in [self._modules.get(id(mod))] if name}
        parts = path.split(".") if path else []
        out = []
        for n in range(len(parts), -1, -1):
            p = ".".join(parts[:n])
            if p in by_path:
                out.append((p, by_path[p]))
        return out

    def tensor(self, t: torch.Tensor) -> tuple[str, str, nn.Module] | None:
        """(kind, qualified name, owner module) of a parameter or buffer, by identity."""
        if not self._built:
            self._build()
        entry = self._tensors.get(id(t))
        if (
            (entry is None or entry[0]() is not t)
            and isinstance(t, nn.Parameter)
            and id(t) not in self._missed
        ):
            self._build()  # a parameter added since (an adapter injected after the first forward)
            entry = self._tensors.get(id(t))
            if entry is None or entry[0]() is not t:
                self._missed.add(id(t))  # not under any root: do not rebuild for it again
        if entry is None or entry[0]() is not t:
            return None
        return entry[1], entry[2], entry[3]


_LEVELS = 16  # recursion allowance is added this many module levels at a time (two sys calls each)


def _blocks(depth: int) -> int:
    """Blocks of allowance held at this module depth (one from the first level on)."""
    return (depth + _LEVELS - 1) // _LEVELS


def _lower_recursion_limit(levels: int) -> None:
    """Give back what `_pre` added for the levels just left (never below what the program can use)."""
    if levels > 0:
        try:  # noqa: SIM105 (per module call: a bare try costs nothing, contextlib.suppress does)
            sys.setrecursionlimit(max(sys.getrecursionlimit() - levels, 50))
        except (ValueError, RecursionError):
            pass


def _raise_recursion_limit() -> None:
    # torch's hooked call path (`inner`) is one frame more per module level than its fast path:
    # one more level of recursion allowed per level, so a deep model runs as deep as it does
    # unwatched; given a block of levels at a time, at depths 1, 17, 33...
    sys.setrecursionlimit(sys.getrecursionlimit() + _LEVELS)


_any_autocast = getattr(torch._C, "_is_any_autocast_enabled", lambda: True)
_NONE: list = []  # the stack of a thread that has run no module yet (never appended to)


class _Stacks(threading.local):
    stack: list = _NONE
    nested: set[int] | frozenset[int] = frozenset()  # ids of the modules on_nested is called for
    exits: list = _NONE  # (depth, module, callback(output)) awaiting that call's return, innermost last


class ModuleStack:
    """The modules being run right now, innermost last.

    `on_enter(module, args, kwargs_or_None, is_root)` is called for every outermost module call
    (kwargs cost a frame lookup), `on_nested(module, args)` for the calls inside it of the modules
    in `nested_ids`, and of every module while autocast is on (the hot path: it runs with the
    TorchFunctionMode on, and the gate is asked only at the outermost call).
    """

    def __init__(
        self,
        on_enter: Callable[..., None],
        on_error: Callable[[BaseException], None],
        on_exit: Callable[[nn.Module, tuple, Any], None] | None = None,
        gate: Any = None,
        on_nested: Callable[[nn.Module, tuple], None] | None = None,
        nested_ids: set[int] | frozenset[int] = frozenset(),
    ) -> None:
        self._local = _Stacks()  # one stack per thread: threads run modules concurrently
        self._gate = gate  # watch/threads.ThreadGate: which threads this stack follows
        self._on_enter = on_enter
        self._on_nested = on_nested or (lambda module, args: on_enter(module, args, None, False))
        self._nested_ids = nested_ids
        self._on_error = on_error
        self._on_exit = on_exit  # called with (module, args, output) when an outermost call returns
        self._handles: list[Any] = []

    def start(self) -> None:
        self._handles = [
            register_module_forward_pre_hook(self._pre),
            register_module_forward_hook(self._post, always_call=True),
        ]

    def stop(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
        _lower_recursion_limit(_LEVELS * _blocks(len(self.stack)))
        self.stack.clear()

    @property
    def stack(self) -> list[nn.Module]:
        if self._local.stack is _NONE:
            self._local.stack = []
        return self._local.stack

    @property
    def top(self) -> nn.Module | None:
        stack = self.stack
        return stack[-1] if stack else None

    def _pre(self, module: nn.Module, args: tuple) -> None:
        if is_dynamo_compiling() or compiler_flags._is_compiling_flag:
            return  # dynamo is tracing this hook: leave the compiled graph the user's own
        local = self._local
        stack = local.stack
        if stack:  # a nested call (the gate let its outermost call in): the cheap common case
            if (local.nested and id(module) in local.nested) or _any_autocast():
                try:
                    self._on_nested(module, args)
                except DtypeMismatchError:
                    raise  # strict mode stops here on purpose
                except Exception as exc:
                    self._on_error(exc)
            stack.append(module)
            if len(stack) % _LEVELS == 1:
                _raise_recursion_limit()
            return
        if stack is _NONE:
            stack = local.stack = []
        if self._gate is not None and not self._gate.enter(True):
            return
        # the explicit models other than this call's own (a call of it inside itself is rare)
        local.nested = self._nested_ids - {id(module)}
        try:
            with _no_torch_function():  # our own tensor inspection must not go through the mode
                self._on_enter(module, args, call_kwargs(), True)
        except DtypeMismatchError:
            raise
        except Exception as exc:  # the tool never breaks the user's forward
            self._on_error(exc)
        stack.append(module)
        _raise_recursion_limit()

    def on_return(self, callback: Callable[[Any], None]) -> None:
        """Call `callback(output)` when the innermost running module call returns (not when it raises)."""
        local = self._local
        if local.stack is _NONE or not local.stack:
            return
        if local.exits is _NONE:
            local.exits = []
        local.exits.append((len(local.stack), local.stack[-1], callback))

    def _returned(self, depth: int, module: nn.Module, output: Any) -> None:
        exits = self._local.exits
        while exits and exits[-1][0] >= depth:
            at, owner, callback = exits.pop()
            if at == depth and owner is module and output is not None:
                try:
                    with _no_torch_function():
                        callback(output)
                except Exception as exc:
                    self._on_error(exc)

    def _post(self, module: nn.Module, args: tuple, output: Any) -> None:
        if is_dynamo_compiling() or compiler_flags._is_compiling_flag:
            return
        local = self._local
        stack = local.stack
        depth = len(stack)
        if local.exits:
            self._returned(depth, module, output)
        if depth and stack[-1] is module:
            stack.pop()
            if depth % _LEVELS == 1:
                _lower_recursion_limit(_LEVELS)
            if depth > 1:
                return
            if self._on_exit is not None:
                try:
                    with _no_torch_function():
                        self._on_exit(module, args, output)
                except Exception as exc:
                    self._on_error(exc)
        else:
            for i in range(len(stack) - 1, -1, -1):
                if stack[i] is module:
                    del stack[i:]
                    break
            _lower_recursion_limit(_LEVELS * (_blocks(depth) - _blocks(len(stack))))
        if self._gate is not None and not stack:
            self._gate.leave(True)

    def param_dtype(self) -> torch.dtype | None:
        """The floating dtype of the innermost running module that owns parameters."""
        for mod in reversed(self.stack):
            for p in mod._parameters.values():
                if p is not None and p.is_floating_point():
                    return p.dtype
        return None
