"""A module whose low-precision values went wrong inside an autocast region: where its dtype was chosen.

A module fed half tensors by autocast (a loss called inside `with torch.autocast(...)`, on the
bfloat16 logits autocast made) computes in that dtype although nothing of the module asked for
it: the region did. The finding names the region (file:line) as the place the precision was
chosen, and the fix computes the module in float32 where its forward begins: its half inputs
`.float()` (the maintainers' fix of a loss under autocast), never a lower dtype anywhere.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Any

from torch import nn

from .. import remedies
from ..editing.source import Source, call_name
from ..patching.autocast_edits import DEVICE, operands_of, wrapped_in_fp32
from ..report import Evidence, Finding
from ..tracing.files import library_file
from .frames import where

_LOW = ("float16", "bfloat16")
_REMEDY = remedies.FixTemplate(
    title="Compute '{module}' in float32: its {dtype} inputs .float() where its forward begins",
    why="autocast chose {dtype} for what the region computes; this module's values need float32, "
    "so it takes its inputs in float32 (ops autocast keeps in float32 then stay so).",
)


def annotate(finding: Finding, producer: Any, module: nn.Module | None, region: Any) -> None:
    """Name the autocast region a forward producer ran in, and the float32 entry of its forward."""
    if region is None or getattr(producer, "phase", None) != "forward" or "autocast_region" in finding.data:
        return
    file, line, text = region
    low = [o for o in producer.inputs if o.dtype in _LOW]
    if not low:
        return
    dtype = low[0].dtype
    finding.data["autocast_region"] = {"file": file, "line": line, "text": text}
    said = f"It ran inside `{text}` at {file}:{line}: autocast chose {dtype} for its inputs."
    finding.message = f"{finding.message.rstrip()} {said}"
    finding.evidence.append(Evidence(said, line=line, source=file))
    entry = _forward_entry(module, [o.name for o in low])
    if entry is None:
        return
    at_file, at_line, names = entry
    snippet = "\n".join(f"{n} = {n}.float()" for n in names)
    fix = remedies.make(
        remedies.FixTemplate(title=_REMEDY.title, snippet=snippet, why=_REMEDY.why),
        file=at_file,
        line=at_line,
        module=finding.location.module if finding.location else "the module",
        dtype=dtype,
    )
    if fix is not None:
        finding.fixes = remedies.first(finding.fixes, fix)


def _own_forward(module: nn.Module | None) -> Any:
    """The module class's own forward, under its decorators (`@torch.no_grad()`), or None."""
    forward = getattr(type(module), "forward", None) if module is not None else None
    if forward is None or forward is nn.Module.forward:
        return None
    try:
        return inspect.unwrap(forward)
    except ValueError:
        return None


def _forward_entry(module: nn.Module | None, positions: list[str]) -> tuple[str, int, list[str]] | None:
    """(file, first body line, parameter names) of the module's own forward, for the inputs at
    `positions` ('0', '1': positional; else a keyword's name)."""
    forward = _own_forward(module)
    if forward is None:
        return None
    try:
        lines, first = inspect.getsourcelines(forward)
        file = inspect.getsourcefile(forward)
        fn = ast.parse(textwrap.dedent("".join(lines))).body[0]
    except (OSError, TypeError, SyntaxError, IndexError):
        return None
    if not isinstance(fn, ast.FunctionDef) or file is None or library_file(file):
        return None
    params = [a.arg for a in fn.args.posonlyargs + fn.args.args][1:]  # without self
    names = []
    for pos in positions:
        name = params[int(pos)] if pos.isdigit() and int(pos) < len(params) else pos
        if name in params or name in [a.arg for a in fn.args.kwonlyargs]:
            names.append(name)
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        body = body[1:]  # the docstring
    if not names or not body:
        return None
    return where(file, 0).rsplit(":", 1)[0], first + body[0].lineno - 1, names


# ops every autocast device runs in its low dtype (torch's lower-precision lists: CPU and CUDA)
_LOWERED = frozenset(
    {"matmul", "mm", "bmm", "baddbmm", "addmm", "addbmm", "linear", "einsum", "conv1d", "conv2d"}
)


def lowered_ops(finding: Finding, module: nn.Module | None, region: Any, dtype: str) -> None:
    """A module wrong in a low dtype inside an autocast region, its op not located by a re-run: the
    ops of its own forward that autocast runs in `dtype`, and the first computed in float32 there."""
    if region is None or "autocast_region" in finding.data:
        return
    file, line, text = region
    finding.data["autocast_region"] = {"file": file, "line": line, "text": text}
    said = f"It ran inside `{text}` at {file}:{line}."
    found = _lowered_statements(module)
    if found:
        src, stmts = found
        shown = ", ".join(
            f"`{src.segment(s).strip()[:80]}` ({where(src.path, s.lineno)})" for s, _ in stmts[:3]
        )
        said += f" Autocast runs these ops of its forward in {dtype}: {shown}."
    finding.message = f"{finding.message.rstrip()} {said}"
    finding.evidence.append(Evidence(said, line=line, source=file))
    m = DEVICE.search(text)
    if not found or m is None:
        return
    src, stmts = found
    stmt, op = stmts[0]
    edit = wrapped_in_fp32(src, stmt, operands_of(stmt, op), m.group(2))
    at = where(src.path, stmt.lineno)
    fix = remedies.make(
        remedies.FixTemplate(
            title=f"Compute `{op}` in float32 at {at}: its operands .float() inside torch.autocast(enabled=False)",
            snippet=textwrap.dedent(edit.text).replace("{", "{{").replace("}", "}}"),
            why="autocast lowers this op to the region's dtype; the values need float32 here "
            "(a table, phases, a reduction), so autocast is disabled around it and its inputs upcast.",
        ),
        file=at.rsplit(":", 1)[0],
        line=stmt.lineno,
    )
    if fix is not None:
        finding.fixes = remedies.first(finding.fixes, fix)


def _lowered_statements(module: nn.Module | None) -> tuple[Source, list[tuple[ast.stmt, str]]] | None:
    forward = _own_forward(module)
    if forward is None:
        return None
    try:
        file = inspect.getsourcefile(forward)
        first = inspect.getsourcelines(forward)[1]
        src = Source.read(file) if file else None
    except (OSError, TypeError, SyntaxError, UnicodeDecodeError):
        return None
    if src is None or library_file(src.path):
        return None
    fn = next((n for n in src.nodes(ast.FunctionDef) if n.lineno >= first and n.name == "forward"), None)
    if fn is None:
        return None
    out: list[tuple[ast.stmt, str]] = []
    for stmt in ast.walk(fn):
        if not isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.Return, ast.Expr)):
            continue
        for node in ast.walk(stmt):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
                out.append((stmt, "matmul"))
                break
            if isinstance(node, ast.Call) and call_name(node.func).rsplit(".", 1)[-1] in _LOWERED:
                out.append((stmt, call_name(node.func).rsplit(".", 1)[-1]))
                break
    return (src, sorted(out, key=lambda s: s[0].lineno)) if out else None
