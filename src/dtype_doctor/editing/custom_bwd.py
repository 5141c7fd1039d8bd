"""A custom autograd Function whose forward runs under autocast's rules and whose backward does not.

`@torch.amp.custom_fwd` (or `torch.cuda.amp.custom_fwd`) on `forward` makes it run in the autocast
state of the call (bfloat16 outputs, so bfloat16 gradients); without `custom_bwd` on `backward`
the backward runs with autocast off and multiplies those gradients by the float32 tensors it
saved. The fix is the decorator torch pairs with the forward's, on the backward, with the same
device_type. Source only: no torch import.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from .source import Source, call_name


@dataclass(frozen=True)
class MissingBwd:
    cls: str  # the Function subclass
    forward_line: int  # the line of the forward's custom_fwd decorator
    backward_line: int  # the `def backward` line: the decorator goes right above it
    decorator: str  # `@torch.amp.custom_bwd(device_type="cpu")`
    indent: str


def decorated_by(node: ast.expr, last: str) -> bool:
    """`node` (a decorator) is `last` or a call of it, by its last dotted name (`torch.amp.custom_fwd(...)`)."""
    func = node.func if isinstance(node, ast.Call) else node
    return call_name(func).rsplit(".", 1)[-1] == last


def missing_custom_bwd(src: Source, line: int) -> MissingBwd | None:
    """The Function whose `backward` holds `line`, when its forward has custom_fwd and it lacks custom_bwd."""
    for cls in src.nodes(ast.ClassDef):
        methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
        bwd, fwd = methods.get("backward"), methods.get("forward")
        if bwd is None or fwd is None or not bwd.lineno <= line <= (bwd.end_lineno or bwd.lineno):
            continue
        fwd_dec = next((d for d in fwd.decorator_list if decorated_by(d, "custom_fwd")), None)
        if fwd_dec is None or any(decorated_by(d, "custom_bwd") for d in bwd.decorator_list):
            return None
        text = _bwd_decorator(src, fwd_dec)
        if text is None:
            return None
        return MissingBwd(cls.name, fwd_dec.lineno, bwd.lineno, text, src.indent(bwd.lineno))
    return None


def _bwd_decorator(src: Source, fwd: ast.expr) -> str | None:
    """`torch.amp.custom_fwd(device_type="cpu", cast_inputs=...)` → `@torch.amp.custom_bwd(device_type="cpu")`
    (custom_bwd takes no cast_inputs); a bare `custom_fwd` name only where `custom_bwd` is bound too."""
    func = fwd.func if isinstance(fwd, ast.Call) else fwd
    name = call_name(func)
    if "." not in name and "custom_bwd" not in _imported(src):
        name = "torch.amp.custom_bwd" if isinstance(fwd, ast.Call) and _device(fwd) else ""
        if not name:
            return None
    else:
        name = name.rsplit(".", 1)[0] + ".custom_bwd" if "." in name else "custom_bwd"
    if not isinstance(fwd, ast.Call):
        return f"@{name}"
    args = [src.segment(a) for a in fwd.args]
    args += [f"{k.arg}={src.segment(k.value)}" for k in fwd.keywords if k.arg not in ("cast_inputs", None)]
    return f"@{name}({', '.join(args)})"


def _device(call: ast.Call) -> bool:
    return bool(call.args) or any(k.arg == "device_type" for k in call.keywords)


def _imported(src: Source) -> set[str]:
    names: set[str] = set()
    for node in src.nodes(ast.ImportFrom):
        names |= {a.asname or a.name for a in node.names}
    return names
