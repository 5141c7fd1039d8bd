"""A failure inside a custom autograd Function's backward that autocast's state explains.

The forward decorated with `custom_fwd` ran under autocast (its outputs, so the gradients that come
back, are half); the backward, without `custom_bwd`, runs with autocast off against the float32
tensors it saved. The half operand's dtype was born at the forward's decorator; the place to act is
the backward's `def`, given the decorator torch pairs with the forward's.
"""

from __future__ import annotations

import ast
from types import FrameType

from .. import remedies
from ..editing.custom_bwd import missing_custom_bwd
from ..editing.source import Source
from ..report import Finding, Origin
from .provenance import short_path

_LOW = ("float16", "bfloat16")
_REMEDY = remedies.FixTemplate(
    title="Run `{cls}.backward` under the forward's autocast state: add custom_bwd at {file}:{line}",
    why="custom_fwd runs the forward under autocast; custom_bwd makes the backward run in the same "
    "autocast state, so its ops cast the half gradients and the float32 saved tensors alike.",
)


def link(finding: Finding, frame: FrameType | None, line: int | None = None) -> None:
    """When the failing line is in such a backward: the half operand's birth, the fix at the `def`."""
    if frame is None:
        return
    try:
        src = Source.read(frame.f_code.co_filename)
        missing = missing_custom_bwd(src, line or frame.f_lineno)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return
    if missing is None:
        return
    file = short_path(frame.f_code.co_filename)
    low = [o for o in finding.operands if o.dtype in _LOW]
    if not low:
        return
    where_def = Origin(
        kind="call",
        name=f"`{missing.cls}.backward` has no custom_bwd: it runs with autocast off",
        file=file,
        line=missing.backward_line,
    )
    for o in low:
        o.origin = Origin(
            kind="autocast",
            name=o.name,
            op="custom_fwd",
            file=file,
            line=missing.forward_line,
            dtype=o.dtype,
            chain=[where_def, *([o.origin] if o.origin is not None and o.origin.kind != "unknown" else [])],
        )
    finding.message = finding.message.rstrip(". ") + (
        f". `{missing.cls}.forward` runs under autocast (custom_fwd at {file}:{missing.forward_line}), so the"
        f" gradients reaching its backward are {low[0].dtype}; its backward has no custom_bwd"
        f" ({file}:{missing.backward_line}), so it runs with autocast off against float32 saved tensors."
    )
    header = "\n".join(
        [*(f"@{src.segment(d)}" for d in _decorators(src, missing.backward_line)), missing.decorator]
    )
    snippet = f"{header}\n{_signature(src, missing.backward_line)}\n    ...\n"
    fix = remedies.make(
        remedies.FixTemplate(
            title=_REMEDY.title, snippet=snippet.replace("{", "{{").replace("}", "}}"), why=_REMEDY.why
        ),
        file=file,
        line=missing.backward_line,
        cls=missing.cls,
    )
    if fix is not None:
        finding.fixes = remedies.first(finding.fixes, fix)


def _decorators(src: Source, def_line: int) -> list:
    fn = next(n for n in src.nodes(ast.FunctionDef) if n.lineno == def_line)
    return list(fn.decorator_list)


def _signature(src: Source, def_line: int) -> str:
    fn = next(n for n in src.nodes(ast.FunctionDef) if n.lineno == def_line)
    return f"def {fn.name}({ast.unparse(fn.args)}):"
