"""Only what torch accepts and the user's file has: the static check every watch fix passes.

A snippet is refused when pasting it could not work: it does not parse, asks autocast for a device or
dtype torch refuses (CPU float32, meta, CUDA in a CPU run), globs in `get_submodule`, converts a model
to the dtype it already has, or reads a variable the user's frame does not have.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from .. import remedies
from ..report import Fix
from ..tracing.casts import METHOD_DTYPE
from . import call_memo
from .names import loaded_names

_AUTOCAST = re.compile(
    r"autocast\(\s*(?:device_type\s*=\s*)?[\"'](\w+)[\"'](?:[^)]*dtype\s*=\s*torch\.(\w+))?"
)
_CUDA = re.compile(r"[\"']cuda[\"']|torch\.cuda\.amp|\.cuda\(\)")
_GLOB = re.compile(r"get_submodule\(\s*[\"'][^\"']*[*?\[]")
_CONVERT = re.compile(
    r"^\s*(?:\w+\s*=\s*)?([\w.]+)\.(?:to\(torch\.(\w+)\)|(half|float|bfloat16)\(\))\s*(?:#.*)?$"
)


def refusal(
    fix: Fix,
    device: str,
    names: set[str] | None,
    scope: dict[str, Any] | None = None,
    known: dict[tuple, bool] | None = None,
) -> str | None:
    """Why the snippet cannot work when pasted, or None when it passes the static check.

    known: (id of a module in `scope`, dtype) -> whether it is all that dtype already, filled in."""
    if fix.language != "python" or not fix.snippet.strip():
        return None
    code = "\n".join(line.split("#")[0] for line in fix.snippet.splitlines())
    unfit = _unparsable(fix.snippet)
    if unfit:
        return unfit
    for m in _AUTOCAST.finditer(code):
        dev, dt = m.group(1), m.group(2)
        if dev not in ("cpu", "cuda", "xpu", "mps") or dev != device:
            return f"autocast on {dev!r} in a {device} run"
        if dt in ("float32", "float64"):
            return "autocast refuses float32"
        if dev == "cpu" and dt == "float16" and not _cpu_fp16_autocast():
            return "this torch's CPU autocast has no float16"
    if device != "cuda" and _CUDA.search(code):
        return f"CUDA in a {device} run"
    if _GLOB.search(code):
        return "get_submodule takes no glob"
    if scope is not None:
        for line in code.splitlines():
            m = _CONVERT.match(line)
            if m is None:
                continue
            want = m.group(2) or METHOD_DTYPE.get(m.group(3) or "", "")
            if _already(scope, m.group(1), want, {} if known is None else known):
                return f"{m.group(1)} is already {want}"
    if names is not None:
        missing = (_loaded(fix.snippet) or set()) - names
        if missing:
            return "names what your code does not have: " + ", ".join(sorted(missing))
    return None


def _cpu_fp16_autocast() -> bool:
    try:
        with torch.autocast("cpu", dtype=torch.float16):
            return torch.get_autocast_dtype("cpu") == torch.float16
    except Exception:
        return False


@functools.lru_cache(maxsize=1024)
def _unparsable(snippet: str) -> str | None:
    """Why the snippet, as text, cannot be pasted: it does not parse or holds a placeholder (cached: a
    run with many mismatches checks the same few snippets for each)."""
    try:
        tree = ast.parse(snippet)
    except SyntaxError:
        return "does not parse"
    if any(isinstance(n, ast.Constant) and n.value is Ellipsis for n in ast.walk(tree)):
        return "a placeholder (...) instead of your arguments"
    return None


@functools.lru_cache(maxsize=1024)
def _loaded(snippet: str) -> frozenset[str] | None:
    names = loaded_names(snippet)
    return frozenset(names) if names is not None else None


def _already(scope: dict[str, Any], expr: str, dtype: str, known: dict[tuple, bool]) -> bool:
    head, *rest = expr.split(".")
    obj = scope.get(head)
    for part in rest:
        obj = getattr(obj, part, None)
    if not isinstance(obj, nn.Module):
        return False
    key = (id(obj), dtype)
    if key not in known:  # a whole model's parameters: walked once per root call, not per snippet
        known[key] = call_memo.remembered(
            obj, f"all {dtype}", lambda: _all_in(obj, getattr(torch, dtype, None))
        )
    return known[key]


def _all_in(module: nn.Module, want: Any) -> bool:
    floats = (p.dtype for p in module.parameters() if p.is_floating_point())
    first = next(floats, None)  # stops at the first parameter of another dtype
    return first is not None and first == want and all(d == want for d in floats)


def keep_acceptable(
    fixes: list[Fix], device: str, names: set[str] | None, scope: dict[str, Any] | None = None
) -> list[Fix]:
    """The fixes that pass the static check; when none does, the advice of the ones torch accepts,
    without their code: a snippet that names what the user's code does not have is never shown."""
    seen: set[str] = set()
    fixes = [f for f in fixes if not f.snippet.strip() or _first(f.snippet.strip(), seen)]  # one of each
    known: dict[tuple, bool] = {}
    ok = [f for f in fixes if refusal(f, device, names, scope, known) is None]
    if ok:
        return ok
    return [advice(f) for f in fixes if refusal(f, device, None, scope, known) is None]


def advice(fix: Fix) -> Fix:
    """The fix as words only: its snippet names what the user's code lacks, so it cannot be pasted."""
    if not fix.snippet.strip():
        return fix
    return replace(fix, snippet="", language="", verified=None, verification="", file=None, line=None)


def _first(code: str, seen: set[str]) -> bool:
    key = "\n".join(line.split("#")[0].rstrip() for line in code.splitlines())
    if key in seen:
        return False
    seen.add(key)
    return True


_MODEL = re.compile(r"(?<![\w.\"'])model(?=\s*[.=(\[)\],]|\s*$)")


def renamed(fix: Fix, model: str) -> Fix:
    """The fix with the catalog's generic `model` written as the user's own expression for it."""
    if fix.language != "python" or model == "model" or "model" not in fix.snippet:
        return fix
    lines = []
    for line in fix.snippet.splitlines():
        code, sep, comment = line.partition("#")
        lines.append(_MODEL.sub(model, code) + sep + comment)
    # a new snippet is not the one any replay tried: no label carried over
    return remedies.revise(fix, snippet="\n".join(lines), verified=None, verification="")
