"""The user's statement at an op's line, and that statement rewritten to keep float32 precision.

Read with `ast` from the file the op ran in: the call (or operator) that ran the op, its receiver
(`x` in `x.clamp(...)`, `torch.clamp(x, ...)`, `x * y`, `x[i] = v`), and three edits that keep the
intended precision: the receiver upcast (`x.float()`), a factory's `dtype=` made float32, a cast
down dropped. None wherever the line does not show the op plainly.
"""

from __future__ import annotations

import ast
import functools
import linecache
import math

from ..editing.source import current_lines, file_stamp
from ..tracing.inplace import in_place

_BINOPS = {
    ast.Add: ("add", "__add__", "__radd__", "__iadd__"),
    ast.Sub: ("sub", "__sub__", "__rsub__", "__isub__", "rsub"),
    ast.Mult: ("mul", "__mul__", "__rmul__", "__imul__"),
    ast.Div: ("div", "true_divide", "__truediv__", "__rtruediv__", "__itruediv__"),
    ast.Pow: ("pow", "__pow__", "__rpow__", "__ipow__"),
    ast.MatMult: ("matmul", "__matmul__", "__rmatmul__"),
}


def source_tree(file: str) -> ast.Module | None:
    """The parsed source of `file` as it is now (None when it does not parse), cached per version;
    linecache then holds that version for the segments read from it."""
    return _tree_at(file_stamp(file), file)


@functools.lru_cache(maxsize=256)
def _tree_at(stamp: tuple, file: str) -> ast.Module | None:
    try:
        return ast.parse("".join(current_lines(file)))
    except (SyntaxError, ValueError):
        return None


def statement(file: str | None, line: int | None) -> tuple[str, ast.stmt] | None:
    """The source of the simple statement that holds `line`, and its node."""
    if not file or not line:
        return None
    tree = source_tree(file)
    if tree is None:
        return None
    best = None
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.stmt)
            and not hasattr(node, "body")
            and node.lineno <= line <= (node.end_lineno or 0)
        ):
            best = node
    if best is None:
        return None
    text = ast.get_source_segment("".join(linecache.getlines(file)), best)
    return (text, best) if text else None


def _node_of(node: ast.stmt, op: str) -> tuple[ast.AST, ast.expr | None] | None:
    """(the node that runs `op` in the statement, its receiver)."""
    name = in_place(op)[0]
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            func = sub.func
            called = (
                func.attr
                if isinstance(func, ast.Attribute)
                else func.id
                if isinstance(func, ast.Name)
                else ""
            )
            if called.rstrip("_") != name.rstrip("_"):
                continue
            if isinstance(func, ast.Attribute) and not (
                isinstance(func.value, ast.Name) and func.value.id in ("torch", "F")
            ):
                return sub, func.value
            return sub, sub.args[0] if sub.args else None
        if isinstance(sub, (ast.BinOp, ast.AugAssign)) and name in _BINOPS.get(type(sub.op), ()):
            left = sub.left if isinstance(sub, ast.BinOp) else sub.target
            return sub, left
        if name == "__setitem__" and isinstance(sub, ast.Assign):
            target = sub.targets[0]
            if isinstance(target, ast.Subscript):
                return sub, target.value
    return None


def _segment(file: str, node: ast.AST) -> str | None:
    return ast.get_source_segment("".join(linecache.getlines(file)), node)


def _op_in(
    file: str | None, line: int | None, op: str
) -> tuple[str, ast.stmt, ast.AST, ast.expr | None] | None:
    """(the statement's source, its node, the node that runs `op`, its receiver)."""
    found = statement(file, line)
    if found is None:
        return None
    hit = _node_of(found[1], op)
    return (found[0], found[1], hit[0], hit[1]) if hit is not None else None


def receiver(file: str | None, line: int | None, op: str) -> str | None:
    """The source of the tensor the op ran on (`x` in `x.clamp(...)`), when the line shows it."""
    found = _op_in(file, line, op)
    if found is None or found[3] is None:
        return None
    return _segment(file, found[3])  # type: ignore[arg-type]


def upcast(file: str | None, line: int | None, op: str, tensors: int = 1) -> str | None:
    """The statement with the op's receiver upcast to float32 (`x.float().clamp(...)`); with
    `tensors` >= 2 (the op took that many floating tensors) every operand of the op is, so that
    their dtypes agree (`a.float() @ b.float()`, `torch.bmm(q.float(), k.float())`)."""
    found = upcast_operands(file, line, op, tensors)
    return found[0] if found is not None else None


def upcast_operands(
    file: str | None, line: int | None, op: str, tensors: int = 1
) -> tuple[str, list[str]] | None:
    """`upcast`'s statement, and the source of each operand it upcasts."""
    found = _op_in(file, line, op)
    if found is None or found[3] is None:
        return None
    text, node, call, target = found
    if isinstance(call, (ast.Assign, ast.AugAssign)) or in_place(op)[1]:
        # stored into the tensor itself: make the tensor float32 first, then the statement as is
        if not isinstance(target, (ast.Name, ast.Attribute)):
            return None
        name = _segment(file, target)  # type: ignore[arg-type]
        return (f"{name} = {name}.float()\n{text}", [name]) if name else None
    operands = _operands(call, target) if tensors >= 2 else [target]
    if len(operands) != tensors:
        operands = [target]  # the line does not show which of its operands are the tensors
    if any(_literal(o) for o in operands):
        return None  # a number (`torch.tensor(-1e9, ...)`): nothing to upcast, `(-1e9).float()` fails
    return _upcast_each(file, text, node, operands)  # type: ignore[arg-type]


def _upcast_each(
    file: str | None, text: str, node: ast.AST, nodes: list[ast.expr]
) -> tuple[str, list[str]] | None:
    """`text` with each of `nodes` (in the statement `node`) made `.float()`, last first so that the
    earlier positions hold, and the source of each; None when one cannot be rewritten."""
    new: str | None = text
    for operand in sorted(nodes, key=lambda n: (n.lineno, n.col_offset), reverse=True):
        new = _replace(file, new, node, operand, lambda src, o=operand: _wrap(src, o) + ".float()")  # type: ignore[arg-type, misc]
        if new is None:
            return None
    return new, [_segment(file, o) or "" for o in nodes]  # type: ignore[arg-type]


def _literal(node: ast.expr) -> bool:
    """A number written in the source: `1e9`, `-1e9`."""
    if isinstance(node, ast.UnaryOp):
        node = node.operand
    return isinstance(node, ast.Constant)


def _operands(call: ast.AST, receiver: ast.expr) -> list[ast.expr]:
    """Every operand of the op that is not a literal: both sides of `a * b`, a call's receiver and
    positional arguments (`torch.bmm(q, k)`, `a.mm(b)`, `torch.einsum("ij,jk", a, b)`)."""
    if isinstance(call, ast.BinOp):
        found = [call.left, call.right]
    elif isinstance(call, ast.Call):
        found = [receiver, *(a for a in call.args if a is not receiver)]
    else:
        found = [receiver]
    return [n for n in found if not isinstance(n, (ast.Constant, ast.UnaryOp, ast.Starred))]


def called_upcast(
    file: str | None, line: int | None, positions: list[int], hints: tuple[str, ...] = ()
) -> tuple[str, list[str]] | None:
    """The statement with the positional arguments at `positions` of the call it makes upcast
    (`loss = nn.NLLLoss()(log_probs.float(), target)`): the op ran inside that call (a library
    module's forward, a function), so its operands are those arguments. The call is the outermost
    one with that many arguments, not one of torch's own functions; several such calls: the one
    whose callee names one of `hints` (the module's type, its attribute name), else None."""
    found = statement(file, line)
    if found is None or not positions:
        return None
    text, node = found
    calls = [
        c
        for c in ast.walk(node)
        if isinstance(c, ast.Call) and len(c.args) > max(positions) and not _torch_function(c.func)
    ]
    inner = {id(n) for c in calls for a in [*c.args, *c.keywords] for n in ast.walk(a)}
    calls = [c for c in calls if id(c) not in inner]  # `crit(x.view(-1, c), y)`: the outer call
    if len(calls) > 1:
        calls = [c for c in calls if any(h and h in ast.unparse(c.func) for h in hints)]
    if len(calls) != 1:
        return None
    args = [calls[0].args[i] for i in positions]
    if any(isinstance(a, (ast.Constant, ast.Starred)) for a in args):
        return None
    return _upcast_each(file, text, node, args)


def _torch_function(func: ast.expr) -> bool:
    """`torch.x(...)`, `F.x(...)`, `torch.nn.functional.x(...)`: an op of torch's, not a callee."""
    while isinstance(func, ast.Attribute):
        func = func.value
    return isinstance(func, ast.Name) and func.id in ("torch", "F")


def clamped_exp(file: str | None, line: int | None, op: str, limit: float) -> str | None:
    """The statement with the exponent of `x.exp()` / `torch.exp(x)` clamped at ln(`limit`), so that
    the result stays finite in the dtype whose largest value is `limit`."""
    if in_place(op)[0] not in ("exp", "exp_"):
        return None
    found = _op_in(file, line, op)
    if found is None or found[3] is None:
        return None
    text, node, _call, target = found
    bound = math.floor(math.log(limit) * 100) / 100
    return _replace(file, text, node, target, lambda src: f"{_wrap(src, target)}.clamp(max={bound:g})")  # type: ignore[arg-type]


def float32_factory(file: str | None, line: int | None, op: str) -> str | None:
    """The statement with the factory's `dtype=` argument made torch.float32."""
    found = _op_in(file, line, op)
    if found is None or not isinstance(found[2], ast.Call):
        return None
    text, node, call, _ = found
    for kw in call.keywords:  # type: ignore[attr-defined]
        if kw.arg == "dtype":
            return _replace(file, text, node, kw.value, lambda _src: "torch.float32")  # type: ignore[arg-type]
    return None


def float32_dtype_argument(file: str | None, line: int | None) -> str | None:
    """The statement at `line` with the `dtype=` argument of its call made torch.float32 (the call
    that passed a low dtype down to a factory: `self._build(n, dtype=torch.get_default_dtype())`)."""
    found = statement(file, line)
    if found is None:
        return None
    text, node = found
    for sub in ast.walk(node):
        if not isinstance(sub, ast.Call):
            continue
        for kw in sub.keywords:
            if kw.arg == "dtype" and ast.unparse(kw.value) not in ("torch.float32", "torch.float"):
                return _replace(file, text, node, kw.value, lambda _src: "torch.float32")  # type: ignore[arg-type]
    return None


def module_in_float32(file: str | None, line: int | None, op: str) -> str | None:
    """`without_cast` for a module-wide cast (`model = Net().to(torch.bfloat16)` → `model = Net()`),
    with a forward pre-hook that casts what the model is given to float32, so that the float32
    parameters never meet the low-precision inputs the code makes for them."""
    uncast = without_cast(file, line, op)
    found = statement(file, line)
    if uncast is None or found is None or not isinstance(found[1], ast.Assign):
        return None
    target = found[1].targets[0]
    if not isinstance(target, (ast.Name, ast.Attribute)):
        return None
    name = ast.unparse(target)
    cast = "a.float() if torch.is_tensor(a) and a.is_floating_point() else a"
    return f"{uncast}\n{name}.register_forward_pre_hook(lambda _, args: tuple({cast} for a in args))"


def without_cast(file: str | None, line: int | None, op: str) -> str | None:
    """The statement with the cast down dropped (`t = ts[0:1].to(torch.bfloat16)` → `t = ts[0:1]`)."""
    found = _op_in(file, line, op)
    if found is None or found[3] is None or not isinstance(found[2], ast.Call):
        return None
    text, node, call, target = found
    inner = _segment(file, target)  # type: ignore[arg-type]
    return _replace(file, text, node, call, lambda _src: inner) if inner else None  # type: ignore[arg-type]


def _wrap(src: str, node: ast.expr) -> str:
    simple = (ast.Name, ast.Attribute, ast.Subscript, ast.Call)
    return src if isinstance(node, simple) or _enclosed(src) else f"({src})"


def _enclosed(src: str) -> bool:
    """`src` is one parenthesized expression: `(a * b)`, not `(a) * b` (whose `.float()` would bind
    to `b` alone)."""
    if not src.startswith("("):
        return False
    depth = 0
    for i, ch in enumerate(src):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0:
            return i == len(src) - 1
    return False


def _replace(file: str, text: str, stmt: ast.stmt, node: ast.AST, make: object) -> str | None:
    """`text` (the statement) with `node`'s source replaced by make(its source)."""
    src = _segment(file, node)
    if not src or node.lineno != stmt.lineno or node.end_lineno != stmt.lineno:  # type: ignore[attr-defined]
        return None
    start = node.col_offset - stmt.col_offset  # type: ignore[attr-defined]
    end = node.end_col_offset - stmt.col_offset  # type: ignore[attr-defined]
    if text[start:end] != src:
        return None
    new = text[:start] + make(src) + text[end:]  # type: ignore[operator]
    try:
        ast.parse(new)
    except SyntaxError:
        return None
    return new


def call_argument(file: str | None, line: int | None, method: str) -> str | None:
    """The source of the first argument of `<x>.method(arg)` on the line (`loss` in `scaler.scale(loss)`)."""
    found = _op_in(file, line, method)
    if found is None or not isinstance(found[2], ast.Call) or not found[2].args:
        return None
    return _segment(file, found[2].args[0])  # type: ignore[arg-type]


def dtype_of(file: str | None, line: int | None, op: str) -> str | None:
    """`self.inv_freq` when the op's call passes `dtype=self.inv_freq.dtype` (a dotted name only)."""
    found = _op_in(file, line, op)
    if found is None or not isinstance(found[2], ast.Call):
        return None
    for kw in found[2].keywords:
        value = kw.value
        if kw.arg == "dtype" and isinstance(value, ast.Attribute) and value.attr == "dtype":
            parts = []
            node: ast.expr = value.value
            while isinstance(node, ast.Attribute):
                parts.append(node.attr)
                node = node.value
            if isinstance(node, ast.Name):
                return ".".join([node.id, *reversed(parts)])
    return None


_PRODUCTS = ("matmul", "__matmul__", "__rmatmul__", "bmm", "mm")


def scaled_first(file: str | None, line: int | None, op: str) -> str | None:
    """`s = a @ b / c` rewritten `s = (a / c) @ b` (`torch.bmm(q, k) / c` → `torch.bmm(q / c, k)`):
    the same value, with the division applied before the product can overflow."""
    if in_place(op)[0] not in _PRODUCTS:
        return None
    found = _op_in(file, line, op)
    if found is None:
        return None
    text, node, call, receiver = found
    first = call.left if isinstance(call, ast.BinOp) else receiver
    parent = next(
        (
            n
            for n in ast.walk(node)
            if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div) and n.left is call
        ),
        None,
    )
    if parent is None or first is None or first.lineno != call.lineno:  # type: ignore[attr-defined]
        return None
    product, operand, scale = (_segment(file, n) for n in (call, first, parent.right))  # type: ignore[arg-type]
    if not (product and operand and scale):
        return None
    start = first.col_offset - call.col_offset  # type: ignore[attr-defined]
    divided = f"{_wrap(operand, first)} / {scale}"
    divided = f"({divided})" if isinstance(call, ast.BinOp) else divided
    new = product[:start] + divided + product[start + len(operand) :]
    return _replace(file, text, node, parent, lambda _src: new)  # type: ignore[arg-type]


def float32_names(
    file: str | None, line: int | None, op: str, tensors: int, limit: float | None
) -> tuple[set[str], dict[str, str]]:
    """The catalog context and names of the remedies for an op whose result the low dtype cannot
    hold (`limit`: its dtype's largest value; None when the op is not an overflow): `op-scale`
    (`scaled`: a product's divisor applied to an operand first), `op-clamp` (`clamped`: an exp's
    exponent bounded)
    and `op-upcast` (`upcast`: the statement with every tensor operand upcast; `operands`: which)."""
    ctx: set[str] = set()
    names: dict[str, str] = {}
    scaled = scaled_first(file, line, op) if limit else None
    if scaled:
        ctx.add("op-scale")
        names["scaled"] = scaled
        names["limit"] = f"{limit:g}"
    clamped = clamped_exp(file, line, op, limit) if limit else None
    if clamped:
        ctx.add("op-clamp")
        names["clamped"] = clamped
        names["limit"] = f"{limit:g}"
    found = upcast_operands(file, line, op, tensors)
    if found is not None:
        ctx.add("op-upcast")
        names["upcast"], upcast = found
        listed = ", ".join(f"`{o}`" for o in upcast)
        names["operands"] = f"its operands {listed}" if len(upcast) > 1 else f"its operand {listed}"
    return ctx, names


def cast_call_argument(
    file: str | None, line: int | None, callee: str, index: int, weight: bool
) -> str | None:
    """The statement with the `index`-th argument of its one call of the module `callee` (`self.proj(...)`,
    `proj(...)`) cast to that module's dtype, read from its weights (`self.proj(emb)` →
    `self.proj(emb.to(self.proj.weight.dtype))`; `next(M.parameters()).dtype` unless `weight`):
    the statement stays right whatever dtype the model is run in."""
    found = statement(file, line)
    if found is None or not file:
        return None
    node = found[1]
    calls = [
        n
        for n in ast.walk(node)
        if isinstance(n, ast.Call)
        and (
            (isinstance(n.func, ast.Attribute) and n.func.attr == callee)
            or (isinstance(n.func, ast.Name) and n.func.id == callee)
        )
    ]
    if len(calls) != 1 or index >= len(calls[0].args) or isinstance(calls[0].args[index], ast.Starred):
        return None
    arg, module = calls[0].args[index], _segment(file, calls[0].func)
    dtype = f"{module}.weight.dtype" if weight else f"next({module}.parameters()).dtype"
    return _rewritten(file, node, arg, lambda src: f"{_wrap(src, arg)}.to({dtype})")


def _rewritten(file: str, stmt: ast.stmt, node: ast.expr, make: object) -> str | None:
    """The statement's source (over several lines too) with `node`'s source replaced by make(it)."""
    lines = linecache.getlines(file)

    def offset(line: int, col: int) -> int:  # ast columns count UTF-8 bytes
        return sum(len(row) for row in lines[: line - 1]) + len(lines[line - 1].encode()[:col].decode())

    full = "".join(lines)
    start, end = (
        offset(stmt.lineno, stmt.col_offset),
        offset(stmt.end_lineno or stmt.lineno, stmt.end_col_offset or 0),
    )
    a, b = (
        offset(node.lineno, node.col_offset),
        offset(node.end_lineno or node.lineno, node.end_col_offset or 0),
    )
    new = full[start:a] + make(full[a:b]) + full[b:end]  # type: ignore[operator]
    indent = lines[stmt.lineno - 1][: stmt.col_offset]
    if indent.strip() == "":  # continuation lines without the statement's own indentation
        first, *rest = new.split("\n")
        new = "\n".join([first, *(r[len(indent) :] if r.startswith(indent) else r for r in rest)])
    try:
        ast.parse(new)
    except SyntaxError:
        return None
    return new
