"""The experiment's intervention, inside a re-run of the user's program (never in the user's own
process): the torch calls made directly from chosen lines of the user's files compute in float32.

`$DTYPE_DOCTOR_TRY` is a JSON object: `lines` (["path:line", ...], or "*" for every line of the
user's files but those in `skip`), `wide` (true: float32 is low too, computed in float64: a
float32 program whose precision fails it), `keep` (true: leave the user's own precision choices alone: a cast or factory that
names a low dtype literally (`.half()`, `dtype=torch.float16`), and the ops a library module runs
when a line calls it, so that only the lines that compute in the precision they inherited are
tried), `record` (a file to write, at exit, each user line that made a low-precision
computation: `{"key", "autocast", "low_names", "dtype_names"}` (and `"defaults"`: its factories that
made a low dtype because none was asked), plus `"nonfinite"` under `probe`
when the line, left as it is, made inf/NaN from finite operands, and `"nonfinite_order"` (1: the
first line that did); `"module"`: the module its first
op ran in, or whose buffers its module-wide cast kept, and `"nonfinite_module"`, named as the
watch names them). Paths are relative to the scratch
copy the re-run runs in (`$TMPDIR`), else absolute. For a chosen line:
- an op whose floating operands are float16/bfloat16 (or that autocast lowers) runs on float32
  copies of them, autocast off, and its float32 result flows on;
- a cast to float16/bfloat16 (`.half()`, `.to(torch.bfloat16)`, `.type(...)`) leaves its tensor as it
  was, a factory asked for a low dtype makes float32;
- an in-place op (`x.div_(t)`, `x += y`) computes its float32 result out of place and writes it into
  its tensor as the op would; the float32 result flows on where the line rebinds a name to it
  (`x = x.div_(t)`, `x += y`), elsewhere the tensor is what it returns; writes with no out-of-place
  twin (`__setitem__`, `copy_`, `out=`) are left alone;
- a module-wide cast (`model.half()`) casts the parameters as asked and leaves the module's float32
  buffers float32 (a RoPE `inv_freq`, a frequency table): the line is recorded as a module cast.
"""

from __future__ import annotations

import ast
import atexit
import contextlib
import json
import os
import sys
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map

from ..editing.user_files import is_user_file
from ..tracing.files import TOOL_DIR, TORCH_DIR
from .ops import HALF, WIDE, Tier, finite, nonfinite, out_of_place, writes
from .rewrite import rebound_method

ENV = "DTYPE_DOCTOR_TRY"
_GETTER = type(torch.Tensor.dtype.__get__)
_MODULE_APPLY = torch.nn.Module._apply.__code__
_MODULE_CALL = torch.nn.Module._call_impl.__code__


def _name(func: Any) -> str:
    return getattr(func, "__name__", "") or ""


class Fp32Lines(TorchFunctionMode):
    def __init__(
        self,
        lines: Any,
        record: str | None,
        keep: bool = False,
        resolve: Callable[..., list] | None = None,
        skip: Any = None,
        probe: bool = False,
        modules: tuple[Callable[[], Any], Callable[[Any], str | None]] | None = None,
        tier: Tier = HALF,
    ) -> None:
        super().__init__()
        self.tier = tier
        # (the module running now, a module's name): the watch's, to say in which module a line ran
        self.modules = modules
        self._ran_in: dict[tuple[str, str], weakref.ref] = {}  # (key, "module"/"nonfinite_module") -> module
        self.resolve = resolve  # (frame, name) -> the sites its value came through (watching/dtype_values)
        self.every = lines == "*"
        self.keep = keep
        self.lines = set() if self.every else set(lines or ())
        self.skip = set(skip or ())  # with "*": the lines left as they are
        self.probe = probe  # record which lines make inf/NaN from finite operands (their own precision)
        self.record = record
        self.seen: dict[str, dict[str, Any]] = {}  # key -> what the record says of it
        self.scratch = os.path.realpath(os.environ.get("TMPDIR", "")) + os.sep
        self._user: dict[str, bool] = {}
        self._trees: dict[str, ast.Module | None] = {}
        self._literals: dict[str, bool] = {}
        self.made: dict[int, weakref.ref] = {}  # id -> the float32 tensors the intervention made
        self._made_nonfinite = 0  # under probe: how many lines made inf/NaN so far (their order)
        self._rebinding: dict[tuple[str, int, str], bool] = {}  # (file, line, op) -> _rebinds

    def _frame(self) -> tuple[Any, bool, Any]:
        """The first frame outside torch and this tool: the user's line, when it is in a user file;
        whether the op runs inside a module that line called (a library module's own op); and the
        module whose module-wide cast (`model.half()`) runs the op, if one does (the innermost)."""
        f = sys._getframe(1)
        in_module, applying = False, None
        while f is not None:
            file = f.f_code.co_filename
            if f.f_code is _MODULE_APPLY and applying is None:
                applying = f.f_locals.get("self")
            if not (file.startswith((TORCH_DIR, TOOL_DIR, "<"))):
                mine = self._user.get(file)
                if mine is None:
                    mine = self._user[file] = is_user_file(file)
                if mine:
                    return f, in_module, applying
                in_module = True  # a library's code (a diffusers decoder) between the op and the line
            in_module = in_module or f.f_code is _MODULE_CALL
            f = f.f_back
        return None, False, None

    def _key(self, frame: Any) -> str:
        return self._key_of(frame.f_code.co_filename, frame.f_lineno)

    def _key_of(self, file: str, line: int) -> str:
        file = os.path.realpath(file)
        where = file[len(self.scratch) :] if file.startswith(self.scratch) else file
        return f"{where}:{line}"

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        name = _name(func)
        inplace = writes(name)
        outplace = out_of_place(name) if inplace else None
        if type(func) is _GETTER or "out" in kwargs or (inplace and outplace is None):
            return func(*args, **kwargs)
        tier = self.tier
        operands = (*args, *kwargs.values())
        low_in = any(tier.is_low(a) for a in operands) or any(
            isinstance(a, (list, tuple)) and any(tier.is_low(x) for x in a) for a in operands
        )
        made_in = bool(self.made) and self._made_in(operands)
        auto = torch.is_autocast_enabled("cpu") or (
            torch.cuda.is_available() and torch.is_autocast_enabled("cuda")
        )
        to_low = name in tier.can_lower and (
            name in tier.lowering
            or any(tier.is_low_dtype(a) for a in operands)
            or (name == "type_as" and len(args) > 1 and tier.is_low(args[1]))
        )
        defaults = (  # `torch.tensor(floats)`: the default dtype
            name in tier.defaulting and kwargs.get("dtype") is None and torch.get_default_dtype() in tier.low
        )
        makes_low = tier.is_low_dtype(kwargs.get("dtype")) or defaults
        # a float32 tensor the intervention made meeting a low one: promote, as the changed
        # decision would have (never the mismatch error a half-changed program meets)
        follow = made_in and low_in and not to_low
        chosen, noted, frame = False, None, None
        if low_in or auto or to_low or makes_low:
            frame, in_module, applying = self._frame()
            if applying is not None:  # a module-wide cast: its float32 buffers may stay float32
                return self._module_cast(func, args, kwargs, frame, applying, to_low)
            if frame is not None:
                key = self._key(frame)
                mine = not (
                    self.keep and (in_module or ((to_low or makes_low) and self._literal(key, frame, name)))
                )
                if mine and self.record is not None:
                    self._note(key, frame, auto, in_module)
                    noted = key
                chosen = mine and self._chosen(key)
        if not (chosen or follow):
            # (torch.empty*, new_empty: their output is whatever the memory held; an in-place op's
            # operands are judged before it overwrites them)
            probing = noted is not None and self.probe and "empty" not in name
            before = probing and inplace and finite(operands)
            out = func(*args, **kwargs)
            if (
                noted is not None
                and probing
                and nonfinite(out, tier)
                and (before if inplace else finite(operands))
            ):
                entry = self.seen[noted]
                if not entry.get("nonfinite"):
                    self._ran(noted, "nonfinite_module")
                    entry["nonfinite_order"] = self._made_nonfinite = self._made_nonfinite + 1
                entry["nonfinite"] = True
            if defaults and noted is not None and tier.is_low(out):
                self._defaulted(noted, name)
            return self._tag(out) if made_in else out
        if to_low and args and isinstance(args[0], torch.Tensor):
            return self._tag(tier.up_copy(args[0]))
        if defaults:
            out = func(*args, **kwargs)  # (the data decides: integers stay integers)
            if not tier.is_low(out):
                return self._tag(out) if made_in else out
            if noted is not None:
                self._defaulted(noted, name)
            kwargs = {**kwargs, "dtype": tier.up}
        elif makes_low:
            kwargs = {**kwargs, "dtype": tier.up}
        target = args[0] if inplace and args and isinstance(args[0], torch.Tensor) else None
        rebound = target is not None and self._rebinds(frame, name)
        args, kwargs = tree_map(tier.up_copy, (args, kwargs))
        cuda_off = (
            torch.autocast("cuda", enabled=False) if torch.cuda.is_available() else contextlib.nullcontext()
        )
        with torch.autocast("cpu", enabled=False), cuda_off:
            out = (outplace or func)(*args, **kwargs)
        if target is not None and isinstance(out, torch.Tensor):
            # an in-place op: the tensor is written as the op would write it; its float32 result
            # flows on where the line rebinds a name to it (`x = x.div_(t)`, `x += y`), else (a
            # chain, `t.mul_(d).add_(s)`; a statement of its own) the tensor is what it returns
            target.copy_(out)
            if not rebound:
                return target
        return self._tag(out)

    def _rebinds(self, frame: Any, name: str) -> bool:
        """The frame's line rebinds a name to what its in-place call `name` returns (`x = x.div_(t)`,
        `x += y`: rewrite.rebound_method, which the line's fix follows)."""
        if frame is None:
            return False
        key = (frame.f_code.co_filename, frame.f_lineno, name)
        found = self._rebinding.get(key)
        if found is None:
            tree = self._tree(frame.f_code.co_filename)
            found = self._rebinding[key] = any(
                n.lineno <= frame.f_lineno <= (n.end_lineno or n.lineno) and rebound_method(n) == name
                for n in (ast.walk(tree) if tree is not None else ())
                if isinstance(n, (ast.Assign, ast.AugAssign))
            )
        return found

    def _defaulted(self, key: str, name: str) -> None:
        """The line's factory `name` made a low dtype because none was asked (its fix asks one)."""
        made = self.seen[key].setdefault("defaults", [])
        if name not in made:
            made.append(name)

    def _module_cast(
        self, func: Any, args: tuple, kwargs: dict, frame: Any, module: Any, to_low: bool
    ) -> Any:
        """One tensor of a module-wide cast (`model.to(torch.bfloat16)`): on a chosen line, a float32
        buffer (a RoPE `inv_freq`, running statistics) lowered by it stays float32, the parameters
        take the user's dtype; the line is recorded as a module cast (its fix keeps those buffers)."""
        tensor = args[0] if args and isinstance(args[0], torch.Tensor) else None
        buffer = (
            to_low
            and tensor is not None
            and tensor.dtype == self.tier.up
            and any(b is tensor for b in getattr(module, "_buffers", {}).values())
        )
        if not buffer or frame is None:
            return func(*args, **kwargs)
        key = self._key(frame)
        if self.record is not None:
            self._note(key, frame, False)
            self.seen[key]["module_cast"] = True
            self._ran(key, "module", module)
        if self._chosen(key):  # not followed: a float32 buffer meets the rest as torch has it
            return tensor
        return func(*args, **kwargs)

    def _chosen(self, key: str) -> bool:
        return key not in self.skip if self.every else key in self.lines

    def _made_in(self, operands: tuple) -> bool:
        for a in operands:
            for x in a if isinstance(a, (list, tuple)) else (a,):
                ref = self.made.get(id(x)) if isinstance(x, torch.Tensor) else None
                if ref is not None and ref() is x:
                    return True
        return False

    def _tag(self, out: Any) -> Any:
        """Remember the float32 tensors of `out` as the intervention's (followed where they flow)."""

        def tag(x: Any) -> Any:
            if isinstance(x, torch.Tensor) and x.dtype == self.tier.up:
                key = id(x)
                self.made[key] = weakref.ref(x, lambda _, key=key: self.made.pop(key, None))
            return x

        tree_map(tag, out)
        return out

    def _literal(self, key: str, frame: Any, name: str) -> bool:
        """The line asks for a low dtype in so many words: `.half()`, or `torch.float16` written out."""
        if name in self.tier.lowering:
            return True
        literal = self._literals.get(key)
        if literal is None:
            tree = self._tree(frame.f_code.co_filename)
            literal = self._literals[key] = any(
                text.startswith("torch.") and self.tier.is_low_dtype(value)
                for text, value in _names_at(tree, frame)
            )
        return literal

    def _note(self, key: str, frame: Any, auto: bool, in_module: bool = False) -> None:
        """What the record says of a user line: autocast was on, which of its names held a
        low-precision tensor or a low dtype (for the edit that makes the line float32); the module
        it ran in: the one whose method holds the line, else (or when its op ran inside a module the
        line called) the innermost module running."""
        entry = self.seen.get(key)
        if entry is None:
            entry = self.seen[key] = {"key": key, "autocast": False, "low_names": [], "dtype_names": []}
            owner = frame.f_locals.get("self") if not in_module else None
            self._ran(key, "module", owner if isinstance(owner, torch.nn.Module) else None)
            for text, value in _names_at(self._tree(frame.f_code.co_filename), frame):
                if self.tier.is_low(value):
                    entry["low_names"].append(text)
                elif self.tier.is_low_dtype(value):
                    entry["dtype_names"].append(text)
                    entry.setdefault("chosen", []).extend(self._chosen_at(frame, text))
        if auto and not entry["autocast"]:
            entry["autocast"] = True
            entry["autocast_device"] = "cpu" if torch.is_autocast_enabled("cpu") else "cuda"

    def _chosen_at(self, frame: Any, text: str) -> list[dict[str, Any]]:
        """Where the low dtype a name on this line holds was chosen: the argument its caller passed
        for a parameter, a variable's assignment (nearest first), as `{"key", "expr"}`."""
        if not text.isidentifier() or self.resolve is None:
            return []
        try:
            sites = self.resolve(frame, ast.Name(id=text, ctx=ast.Load()))
        except Exception:
            return []
        return [{"key": self._key_of(site.file, site.line), "expr": site.name} for site in sites]

    def _tree(self, file: str) -> ast.Module | None:
        if file not in self._trees:
            try:
                with open(file, encoding="utf-8") as fh:
                    self._trees[file] = ast.parse(fh.read())
            except (OSError, SyntaxError, ValueError):
                self._trees[file] = None
        return self._trees[file]

    def _ran(self, key: str, field: str, module: Any = None) -> None:
        """Remember the module running now (or `module`) as the line's `field`, named at exit."""
        if module is None and self.modules is not None:
            module = self.modules[0]()
        if module is not None:
            self._ran_in[key, field] = weakref.ref(module)

    def _name_modules(self) -> None:
        name_of = self.modules[1] if self.modules is not None else None
        for (key, field), ref in self._ran_in.items():
            module = ref()
            name = name_of(module) if name_of is not None and module is not None else None
            if name and key in self.seen:
                self.seen[key][field] = name

    def write(self) -> None:
        if self.record is None:
            return
        with contextlib.suppress(Exception):  # a name is a nicety; the record is what the experiment needs
            self._name_modules()
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
    read: set[int] = set()  # `x += y` reads x too (its target's ctx says Store)
    for node in ast.walk(tree):  # (breadth first: an AugAssign before its target)
        if isinstance(node, ast.AugAssign) and node.lineno == line:
            read.add(id(node.target))
        if not isinstance(node, (ast.Name, ast.Attribute)) or getattr(node, "lineno", None) != line:
            continue
        if not isinstance(node.ctx, ast.Load) and id(node) not in read:
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


def install(
    resolve: Callable[..., list] | None = None,
    modules: tuple[Callable[[], Any], Callable[[Any], str | None]] | None = None,
) -> Fp32Lines | None:
    """The intervention, when this process is an experiment's re-run ($DTYPE_DOCTOR_TRY); `resolve`
    follows a dtype name to where its value was chosen, `modules` gives the module running now and
    a module's name (the watch's, passed in from above)."""
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
    mode = Fp32Lines(
        spec.get("lines"),
        record,
        keep=bool(spec.get("keep")),
        resolve=resolve,
        skip=spec.get("skip"),
        probe=bool(spec.get("probe")),
        modules=modules,
        tier=WIDE if spec.get("wide") else HALF,
    )
    mode.__enter__()
    atexit.register(mode.write)
    return mode
