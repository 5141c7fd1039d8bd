"""The experiment's intervention, inside a re-run of the user's program (never in the user's own
process): the torch calls made directly from chosen lines of the user's files compute in float32.

`$DTYPE_DOCTOR_TRY` is a JSON object: `lines` (["path:line", ...], or "*" for every line of the
user's files) and `record` (a file to write, at exit, each user line that made a low-precision
computation: `{"key", "autocast", "low_names", "dtype_names"}`). Paths are relative to the scratch
copy the re-run runs in (`$TMPDIR`), else absolute. For a chosen line:
- an op whose floating operands are float16/bfloat16 (or that autocast lowers) runs on float32
  copies of them, autocast off, and its float32 result flows on;
- a cast to float16/bfloat16 (`.half()`, `.to(torch.bfloat16)`, `.type(...)`) leaves its tensor as it
  was, a factory asked for a low dtype makes float32;
- in-place ops and writes are left alone (an upcast copy would not be written back).
"""

from __future__ import annotations

import ast
import atexit
import json
import os
import sys
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map

from ..editing.user_files import is_user_file
from ..tracing.casts import CAN_LOWER, LOWERING_METHODS
from ..tracing.files import TOOL_DIR, TORCH_DIR

ENV = "DTYPE_DOCTOR_TRY"
LOW = (torch.float16, torch.bfloat16)
_GETTER = type(torch.Tensor.dtype.__get__)
_MODULE_APPLY = torch.nn.Module._apply.__code__


def _name(func: Any) -> str:
    return getattr(func, "__name__", "") or ""


def _writes(name: str) -> bool:
    """An in-place op or a write (`add_`, `__iadd__`, `__setitem__`): an upcast copy would not be
    written back."""
    if name.startswith("__") and name.endswith("__"):
        return name == "__setitem__" or (
            name.startswith("__i") and name not in ("__index__", "__int__", "__invert__", "__iter__")
        )
    return name.endswith("_")


def _is_low_dtype(x: Any) -> bool:
    return type(x) is torch.dtype and x in LOW


def _low(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.dtype in LOW


def _up(x: Any) -> Any:
    return x.float() if _low(x) else x


class Fp32Lines(TorchFunctionMode):
    def __init__(self, lines: Any, record: str | None) -> None:
        super().__init__()
        self.every = lines == "*"
        self.lines = set() if self.every else set(lines or ())
        self.record = record
        self.seen: dict[str, dict[str, Any]] = {}  # key -> what the record says of it
        self.scratch = os.path.realpath(os.environ.get("TMPDIR", "")) + os.sep
        self._user: dict[str, bool] = {}
        self._trees: dict[str, ast.Module | None] = {}

    def _frame(self) -> Any:
        """The first frame outside torch and this tool: the user's line, when it is in a user file."""
        f = sys._getframe(1)
        while f is not None:
            file = f.f_code.co_filename
            if f.f_code is _MODULE_APPLY:
                return None  # a module-wide cast (`model.half()`): the model's dtype, never one line's op
            if not (file.startswith((TORCH_DIR, TOOL_DIR, "<"))):
                break
            f = f.f_back
        if f is None:
            return None
        file = f.f_code.co_filename
        mine = self._user.get(file)
        if mine is None:
            mine = self._user[file] = is_user_file(file)
        return f if mine else None

    def _key(self, frame: Any) -> str:
        file = os.path.realpath(frame.f_code.co_filename)
        where = file[len(self.scratch) :] if file.startswith(self.scratch) else file
        return f"{where}:{frame.f_lineno}"

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        name = _name(func)
        if type(func) is _GETTER or _writes(name) or "out" in kwargs:
            return func(*args, **kwargs)
        operands = (*args, *kwargs.values())
        low_in = any(_low(a) for a in operands) or any(
            isinstance(a, (list, tuple)) and any(_low(x) for x in a) for a in operands
        )
        auto = torch.is_autocast_enabled("cpu") or (
            torch.cuda.is_available() and torch.is_autocast_enabled("cuda")
        )
        to_low = name in CAN_LOWER and (
            name in LOWERING_METHODS
            or any(_is_low_dtype(a) for a in operands)
            or (name == "type_as" and len(args) > 1 and _low(args[1]))
        )
        makes_low = _is_low_dtype(kwargs.get("dtype"))
        if not (low_in or auto or to_low or makes_low):
            return func(*args, **kwargs)
        frame = self._frame()
        if frame is None:
            return func(*args, **kwargs)
        key = self._key(frame)
        if self.record is not None:
            self._note(key, frame, auto)
        if not (self.every or key in self.lines):
            return func(*args, **kwargs)
        if to_low and args and isinstance(args[0], torch.Tensor):
            return args[0] if args[0].dtype not in LOW else args[0].float()
        if makes_low:
            kwargs = {**kwargs, "dtype": torch.float32}
        args, kwargs = tree_map(_up, (args, kwargs))
        with torch.autocast("cpu", enabled=False):
            if torch.cuda.is_available():
                with torch.autocast("cuda", enabled=False):
                    return func(*args, **kwargs)
            return func(*args, **kwargs)

    def _note(self, key: str, frame: Any, auto: bool) -> None:
        """What the record says of a user line: autocast was on, which of its names held a
        low-precision tensor or a low dtype (for the edit that makes the line float32)."""
        entry = self.seen.get(key)
        if entry is None:
            entry = self.seen[key] = {"key": key, "autocast": False, "low_names": [], "dtype_names": []}
            for text, value in _names_at(self._tree(frame.f_code.co_filename), frame):
                if _low(value):
                    entry["low_names"].append(text)
                elif _is_low_dtype(value):
                    entry["dtype_names"].append(text)
        if auto and not entry["autocast"]:
            entry["autocast"] = True
            entry["autocast_device"] = "cpu" if torch.is_autocast_enabled("cpu") else "cuda"

    def _tree(self, file: str) -> ast.Module | None:
        if file not in self._trees:
            try:
                with open(file, encoding="utf-8") as fh:
                    self._trees[file] = ast.parse(fh.read())
            except (OSError, SyntaxError, ValueError):
                self._trees[file] = None
        return self._trees[file]

    def write(self) -> None:
        if self.record is None:
            return
        try:
            with open(self.record, "w", encoding="utf-8") as fh:
                json.dump(list(self.seen.values()), fh)
        except OSError:
            pass


def _names_at(tree: ast.Module | None, frame: Any) -> list[tuple[str, Any]]:
    """(source text, value) of each name and dotted attribute of names read on the frame's line,
    looked up (never called) in the frame."""
    if tree is None:
        return []
    line = frame.f_lineno
    out: list[tuple[str, Any]] = []
    seen: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Name, ast.Attribute)) or getattr(node, "lineno", None) != line:
            continue
        if not isinstance(node.ctx, ast.Load):
            continue
        text = ast.unparse(node)
        if text in seen:
            continue
        seen.add(text)
        value = _lookup(node, frame)
        if value is not _MISSING:
            out.append((text, value))
    return out


_MISSING = object()


def _lookup(node: ast.expr, frame: Any) -> Any:
    if isinstance(node, ast.Name):
        for space in (frame.f_locals, frame.f_globals, frame.f_builtins):
            if node.id in space:
                return space[node.id]
        return _MISSING
    if isinstance(node, ast.Attribute):
        base = _lookup(node.value, frame)
        if base is _MISSING or (isinstance(base, torch.Tensor) and node.attr not in ("data", "dtype")):
            return _MISSING  # a tensor's attribute: its dtype, a shape; never a property run
        try:
            return (
                getattr(base, node.attr)
                if not isinstance(getattr(type(base), node.attr, None), property)
                else _MISSING
            )
        except Exception:
            return _MISSING
    return _MISSING


def install() -> Fp32Lines | None:
    """The intervention, when this process is an experiment's re-run ($DTYPE_DOCTOR_TRY)."""
    raw = os.environ.get(ENV)
    if not raw:
        return None
    try:
        spec = json.loads(raw)
    except ValueError:
        return None
    record = spec.get("record")
    if record:  # relative: in the scratch copy the re-run runs in
        record = os.path.join(os.environ.get("TMPDIR", ""), record)
    mode = Fp32Lines(spec.get("lines"), record)
    mode.__enter__()
    atexit.register(mode.write)
    return mode
