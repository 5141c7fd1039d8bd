"""The user's own names for what a fix touches: read from the user's frames, never the library's.

A fix is pasted into the user's file, so it must name what that file has: the local variable that
holds the model (`unet`, `pipe.controlnet`), the expression passed at the call site (`latents`), a
module reached from that variable (`model.get_submodule("h.0.ln_1")`). Library parameter names
(`sample`, `hidden_states`) and placeholders never reach a snippet.
"""

from __future__ import annotations

import ast
import functools
import linecache
import sys
from types import FrameType
from typing import Any

import torch
from torch import nn

from ..dtypes import canonical
from ..editing.source import current_lines
from ..remedies.scope import snippet_names
from ..tracing.casts import cast_call
from .provenance import USER, frame_kind

LIBRARY_WORDS = frozenset({"torch", "nn", "F", "dtype_doctor", "dd", "np", "math"})


def user_frames(depth: int = 2, limit: int = 64) -> list[FrameType]:
    """The frames of the user's own code on the stack, innermost first."""
    out: list[FrameType] = []
    try:
        f: FrameType | None = sys._getframe(depth)
    except ValueError:
        return out
    for _ in range(limit):
        if f is None:
            break
        if frame_kind(f.f_code) == USER:
            out.append(f)
        f = f.f_back
    return out


def _components(value: Any) -> dict[str, Any]:
    comps = getattr(value, "components", None) if not isinstance(value, (nn.Module, torch.Tensor)) else None
    return comps if isinstance(comps, dict) else {}


def expression_for(obj: Any, frames: list[FrameType]) -> tuple[str, FrameType] | None:
    """`unet` / `pipe.unet` / `model.classifier`: how the user's code reaches `obj`, and in which
    frame; `self` only when no other name reaches it (a snippet is pasted where the model is used);
    a plain object's attribute (`forecaster.net`) only when nothing else does."""
    for held, allow_self in ((False, False), (False, True), (True, False), (True, True)):
        for f in frames:
            for name, value in list(f.f_locals.items()):
                if name.startswith("__") or not name.isidentifier() or (name == "self") != allow_self:
                    continue
                if value is obj and not held:
                    return name, f
                children = _held_modules(value) if held else _components(value)
                if isinstance(value, nn.Module) and name != "self" and not held:
                    children = dict(value.named_children())
                for key, comp in children.items():
                    if comp is obj and key.isidentifier():
                        return f"{name}.{key}", f
    return None


def _held_modules(value: Any) -> dict[str, Any]:
    """The modules a plain object holds as public attributes (`self.model` of a wrapper class)."""
    if isinstance(value, nn.Module | torch.Tensor | type):
        return {}
    try:
        held = vars(value)
    except TypeError:  # no __dict__
        return {}
    return {k: v for k, v in list(held.items())[:200] if isinstance(v, nn.Module) and not k.startswith("_")}


def module_modules(frame: FrameType) -> list[nn.Module]:
    """Every model the frame holds (modules, and the components of pipelines)."""
    out: list[nn.Module] = []
    for name, value in list(frame.f_locals.items())[:200]:
        if name.startswith("__"):
            continue
        if isinstance(value, nn.Module):
            out.append(value)
        else:
            out.extend(v for v in _components(value).values() if isinstance(v, nn.Module))
    return out


@functools.lru_cache(maxsize=64)
def _calls_in(file: str, stamp: int) -> list[ast.Call]:
    try:
        tree = ast.parse("".join(linecache.getlines(file)))
    except (SyntaxError, ValueError):
        return []
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)]


def calls_at(file: str, line: int) -> list[ast.Call]:
    """The calls written on `line` of `file` (a call over several lines counts on each of them)."""
    lines = current_lines(file)
    if not lines:
        return []
    calls = _calls_in(file, hash(tuple(lines)))
    return [c for c in calls if c.lineno <= line <= (c.end_lineno or c.lineno)]


def _calls_of(frame: FrameType, root: Any) -> list[ast.Call]:
    """The calls of `root` (or of one of its methods) on the frame's current line."""
    out = []
    for call in calls_at(frame.f_code.co_filename, frame.f_lineno):
        text = ast.unparse(call.func)
        func = resolve_text(text, frame) if is_path(text) else None
        if func is root or getattr(func, "__self__", None) is root:
            out.append(call)
    return out


def call_argument(frame: FrameType, root: Any, param: str | None, position: int | None) -> str | None:
    """The expression the user wrote, in the call of `root` on the frame's current line, for argument
    `param` (by keyword) or `position` (positional), when it is a plain name or attribute path."""
    for call in _calls_of(frame, root):
        node = None
        for kw in call.keywords:
            if kw.arg == param:
                node = kw.value
        if node is None and position is not None and position < len(call.args):
            node = call.args[position]
        if node is None:
            continue
        text = ast.unparse(node)
        if is_path(text) and isinstance(resolve_text(text, frame), torch.Tensor):
            return text
    return None


def is_path(text: str) -> bool:
    return all(part.isidentifier() for part in text.split("."))


def resolve_text(text: str, frame: FrameType) -> Any:
    head, *rest = text.split(".")
    obj = frame.f_locals.get(head, frame.f_globals.get(head))
    for part in rest:
        obj = getattr(obj, part, None)
    return obj


def tensor_name(t: torch.Tensor, frames: list[FrameType]) -> str | None:
    """The name a user frame gives the tensor (innermost first); `self` never counts."""
    held = tensor_holder(t, frames)
    return held[0] if held is not None else None


def tensor_holder(t: torch.Tensor, frames: list[FrameType]) -> tuple[str, FrameType] | None:
    """The innermost user frame whose local holds the tensor, and that local's name."""
    for f in frames:
        for name, value in list(f.f_locals.items()):
            if value is t and name != "self" and name.isidentifier() and not name.startswith("__"):
                return name, f
    return None


def stack_facts(frames: list[FrameType], odd: torch.Tensor | None) -> dict[str, Any]:
    """A finding's data about the user's stack: `user_stack` (file:line, innermost first) and
    `odd_variable` (the local that holds the odd operand, and the file:line its frame was at), from
    which the planner finds the variable's last assignment before the failing use."""
    facts: dict[str, Any] = {"user_stack": [f"{f.f_code.co_filename}:{f.f_lineno}" for f in frames]}
    held = tensor_holder(odd, frames) if odd is not None else None
    if held is not None:
        name, frame = held
        at = f"{frame.f_code.co_filename}:{frame.f_lineno}"
        facts["odd_variable"] = {"name": name, "at": at, "dtype": canonical(odd.dtype)}
    return facts


def loaded_names(snippet: str) -> set[str] | None:
    """Names a Python snippet reads before assigning them (None: it does not parse)."""
    names = snippet_names(snippet)
    return set(names[0]) if names is not None else None


def visible(frame: FrameType) -> set[str]:
    """The names a snippet pasted in this frame may use."""
    return set(frame.f_locals) | set(frame.f_globals) | LIBRARY_WORDS


def passed_inputs(frame: FrameType, root: Any, want: torch.dtype) -> list[str]:
    """The names the user passes on the frame's current line to a call of `root` (or one of its
    methods) that hold floating tensors of another dtype than `want`."""
    out: list[str] = []
    for call in _calls_of(frame, root):
        for arg in [*call.args, *(k.value for k in call.keywords)]:
            if cast_call(arg):  # `x.half()`: what is passed is the cast's result, whatever `x` holds
                continue
            # the argument itself when it is a name, else the names inside its expression
            nodes = (
                [arg] if is_path(ast.unparse(arg)) else [n for n in ast.walk(arg) if isinstance(n, ast.Name)]
            )
            for node in nodes:
                text = ast.unparse(node)
                value = resolve_text(text, frame)
                if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != want:
                    out.append(text)
    return list(dict.fromkeys(out))


def call_source(frame: FrameType, root: Any) -> tuple[list[str], dict[str, str]] | None:
    """The argument expressions of the user's call of `root` on the frame's current line, as
    written (positional, keyword), so a replay can evaluate them again after a fix."""
    for call in _calls_of(frame, root):
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            return None
        return [ast.unparse(a) for a in call.args], {
            k.arg: ast.unparse(k.value) for k in call.keywords if k.arg
        }
    return None


def float64_array(frame: FrameType, root: Any) -> str | None:
    """A NumPy float64 array the user's call of `root` reads (`model(torch.from_numpy(batch))`)."""
    for call in _calls_of(frame, root):
        for node in ast.walk(call):
            if isinstance(node, ast.Name):
                value = frame.f_locals.get(node.id, frame.f_globals.get(node.id))
                if type(value).__name__ == "ndarray" and str(getattr(value, "dtype", "")) == "float64":
                    return node.id
    return None
