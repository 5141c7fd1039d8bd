"""The root line's statement rewritten as the line experiment's fix: in float32 (its half operands
`.float()`, a low dtype it names `torch.float32`, `.half()` made `.float()`, autocast off around it),
or, for a module-wide cast, with the module's float32 buffers kept float32 through it. No torch import.
"""

from __future__ import annotations

import ast
from typing import Any

from ..editing.source import Edit, Source, call_name
from ..tracing.casts import LOWERING_FROM_FLOAT64, LOWERING_METHODS, MODULE_LOWERING
from ..tracing.inplace import in_place

# a tensor's attributes that read no value of it
_METADATA = frozenset(
    {"shape", "device", "ndim", "size", "dim", "numel", "is_cuda", "requires_grad", "layout"}
)


# a statement holding others: never rewritten whole
_COMPOUND = (ast.If, ast.For, ast.While, ast.With, ast.FunctionDef, ast.ClassDef, ast.Try)


def rewrite(
    src: Source, line: int, entry: dict[str, Any], keep: bool = False, wide: bool = False
) -> Edit | None:
    """The statement at `line` computing in float32: its half operands `.float()`, a low dtype it
    names `torch.float32` (`keep`: not one written out, `torch.float16`: the user's own choice, which
    the experiment kept), `.half()`/`.bfloat16()` made `.float()`, and under autocast the statement
    inside `with torch.autocast(device_type=..., enabled=False):`. `wide`: in float64 instead (its
    float32 operands `.double()`, `.float()` made `.double()`, a factory that made float32 because
    no dtype was asked given `dtype=torch.float64`). None when nothing would change."""
    stmt = src.statement_at(line)
    if stmt is None or isinstance(stmt, _COMPOUND):
        return None
    low, dtypes = set(entry.get("low_names", ())), set(entry.get("dtype_names", ()))
    method, up = ("double", "torch.float64") if wide else ("float", "torch.float32")
    lowering = LOWERING_FROM_FLOAT64 if wide else LOWERING_METHODS
    defaults = set(entry.get("defaults", ()))
    start = src.offset(stmt.lineno, 0)
    _, end = src.span(stmt)
    spans: list[tuple[int, int, str]] = []
    metadata = {id(n.value) for n in ast.walk(stmt) if isinstance(n, ast.Attribute) and n.attr in _METADATA}
    metadata |= _written_in_place(stmt)  # `.float()` there would write a copy: the update lost
    for node in ast.walk(stmt):
        if getattr(node, "lineno", None) != line:
            continue
        if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load):
            text = ast.unparse(node)
            a, b = src.span(node)
            if text in low and id(node) in metadata:
                continue  # `x.shape[0]`: no value of x is computed with
            if text in low:
                spans.append((a, b, f"{src.text[a:b]}.{method}()"))
            elif text in dtypes and not (keep and text.startswith("torch.")):
                spans.append((a, b, up))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in lowering
            and not node.args
        ):
            a, b = src.span(node.func)
            spans.append((b - len(node.func.attr), b, method))
        if (
            isinstance(node, ast.Call)
            and call_name(node.func).rsplit(".", 1)[-1] in defaults
            and not any(k.arg == "dtype" for k in node.keywords)
        ):
            _, b = src.span(node)
            spans.append((b - 1, b - 1, f"{', ' if node.args or node.keywords else ''}dtype={up}"))
    spans = _outermost(spans)
    body = src.text[start:end]
    for a, b, text in sorted(spans, reverse=True):
        body = body[: a - start] + text + body[b - start :]
    if isinstance(stmt, ast.AugAssign) and src.segment(stmt.target) in low and type(stmt.op) in _AUGMENTED:
        # `x += y` writes into x in its dtype: `x = x.float() + y` computes it in float32
        target = src.segment(stmt.target)
        a, b = src.span(stmt.value)
        value = body[a - start : len(body) - (end - b)]
        symbol = _AUGMENTED[type(stmt.op)][0]
        body = f"{src.indent(stmt.lineno)}{target} = {target}.{method}() {symbol} ({value})"
    if entry.get("autocast"):
        indent = src.indent(stmt.lineno)
        device = entry.get("autocast_device", "cpu")
        lines = body.splitlines(keepends=True)
        inner = "".join(
            ("    " + ln if i else indent + "    " + ln[len(indent) :]) for i, ln in enumerate(lines)
        )
        body = f'{indent}with torch.autocast(device_type="{device}", enabled=False):{src.newline}{inner}'
    if body == src.text[start:end]:
        return None
    return Edit(src.path, start, end, body)


def keep_buffers(src: Source, stmt: ast.stmt) -> Edit | None:
    """A module-wide cast (`model = model.to(torch.bfloat16)`) that keeps the module's float32
    buffers float32: they are set aside before it and put back after it (on the device it moved
    them to). A module made on the line (`Net().half()`) is made first, as `_module`."""
    casts = [
        n
        for n in ast.walk(stmt)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in MODULE_LOWERING
    ]
    if not casts or isinstance(stmt, _COMPOUND):
        return None
    receiver = casts[0].func.value  # type: ignore[attr-defined]
    indent, nl = src.indent(stmt.lineno), src.newline
    start = src.offset(stmt.lineno, 0)
    last = stmt.end_lineno or stmt.lineno
    end = start + len("".join(src.lines[stmt.lineno - 1 : last]).rstrip("\r\n"))  # its comment too
    line, made = src.text[start:end], ""
    model = src.segment(receiver)
    if not isinstance(receiver, (ast.Name, ast.Attribute)):  # made on the line: made before it
        a, b = src.span(receiver)
        line, made, model = (
            line[: a - start] + "_module" + line[b - start :],
            f"{indent}_module = {model}{nl}",
            "_module",
        )
    returned = ""
    if isinstance(stmt, ast.Return):  # `return model.to(dtype)`: the buffers go back before it returns
        line = f"{indent}_cast = {line[len(indent) + len('return ') :]}"
        returned = f"{nl}{indent}return _cast"
    text = (
        f"{made}{indent}_float32_buffers = {{n: b for n, b in {model}.named_buffers() if b.dtype == torch.float32}}{nl}"
        f"{line}{nl}"
        f"{indent}for _name, _buffer in _float32_buffers.items():  # buffers (RoPE tables, statistics) stay float32{nl}"
        f'{indent}    _owner, _, _attr = _name.rpartition("."){nl}'
        f"{indent}    setattr({model}.get_submodule(_owner), _attr, _buffer.to({model}.get_buffer(_name).device))"
        f"{returned}"
    )
    return Edit(src.path, start, end, text)


# an augmented assignment's operator: its symbol, and the in-place op a tensor runs for it
_AUGMENTED = {
    ast.Add: ("+", "add_"),
    ast.Sub: ("-", "sub_"),
    ast.Mult: ("*", "mul_"),
    ast.Div: ("/", "div_"),
    ast.Pow: ("**", "pow_"),
    ast.MatMult: ("@", None),
}


def rebound_method(stmt: ast.stmt) -> str | None:
    """The in-place method whose result the statement binds to the name it updates: `x = x.div_(t)`
    → "div_", `x += y` → "add_" (python rebinds x to what the tensor's `add_` returns); None for any
    other statement. Only there may the in-place op's result differ from its tensor (the experiment
    lets its float32 result flow on, and its fix `.float()`s the receiver)."""
    if isinstance(stmt, ast.AugAssign):
        return _AUGMENTED.get(type(stmt.op), ("", None))[1]
    if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
        return None
    call = stmt.value
    if (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and in_place(call.func.attr)[1]
        and ast.unparse(call.func.value) == ast.unparse(stmt.targets[0])
    ):
        return call.func.attr
    return None


def _written_in_place(stmt: ast.stmt) -> set[int]:
    """The receivers of in-place calls (`x.mul_(2)`) whose update the statement relies on: every one
    but the call whose result it rebinds (`rebound_method`)."""
    rebound = stmt.value if isinstance(stmt, ast.Assign) and rebound_method(stmt) else None
    return {
        id(n.func.value)
        for n in ast.walk(stmt)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and in_place(n.func.attr)[1]
        and n is not rebound
    }


def _outermost(spans: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """Drop a span inside another (`self.x` holds `self`): the outer one is rewritten."""
    return [s for s in spans if not any(o is not s and o[0] <= s[0] and s[1] <= o[1] for o in spans)]
