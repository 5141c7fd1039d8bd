"""Where in a user's source an edit goes: calls on a line, assignments, blocks, `with` items, the
spot for a new statement or an `import torch`. Pure `ast` reading; no torch import."""

from __future__ import annotations

import ast

from .source import Edit, Source, call_name

_NOT_A_MODEL = ("torch.", "np.", "numpy.", "F.", "nn.", "math.", "print", "len", "range")


def calls_on(src: Source, line: int) -> list[ast.Call]:
    return sorted(
        (c for c in src.nodes(ast.Call) if c.lineno <= line <= (c.end_lineno or c.lineno)),
        key=lambda c: (c.lineno != line, c.col_offset),
    )


def model_call(src: Source, line: int) -> ast.Call | None:
    """The call on `line` that is the model's (not torch.*, np.*, print...), outermost first."""
    for call in calls_on(src, line):
        name = call_name(call.func)
        if name and not name.startswith(_NOT_A_MODEL) and name not in ("print", "len", "range"):
            return call
    return None


def argument(call: ast.Call | None, name: str | None) -> ast.expr | None:
    if call is None:
        return None
    for kw in call.keywords:
        if kw.arg is not None and kw.arg == name:
            return kw.value
    tensors = [a for a in call.args if not isinstance(a, (ast.Constant, ast.Starred))]
    return tensors[0] if tensors and not any(kw.arg == name for kw in call.keywords) else None


def keyword_attribute(call: ast.Call, keyword: str, attr: str) -> ast.expr | None:
    """`X` of the call's `keyword=X.attr` (`device=x.device`, `dtype=y.dtype`), else None."""
    for k in call.keywords:
        value = k.value
        if k.arg == keyword and isinstance(value, ast.Attribute) and value.attr == attr:
            return value.value
    return None


def device_partner(call: ast.Call) -> str:
    """`x` of a `device=x.device` argument (a name or an attribute), else ""."""
    partner = keyword_attribute(call, "device", "device")
    return ast.unparse(partner) if isinstance(partner, (ast.Name, ast.Attribute)) else ""


def assigned_value(src: Source, line: int, name: str | None) -> ast.expr | None:
    """The value of `name = VALUE` (or `name: T = VALUE`) on `line`."""
    stmt = src.statement_at(line)
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        target, value = stmt.targets[0], stmt.value
    elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
        target, value = stmt.target, stmt.value
    else:
        return None
    if isinstance(target, ast.Name) and (name is None or target.id == name):
        return value
    if isinstance(target, ast.Attribute) and target.attr == name:
        return value
    return None


def assigned_part(stmt: ast.Assign, name: str) -> ast.expr | None:
    """The part of `stmt`'s value that `name` takes: `b` of `a, name = 1, b`, or the whole value."""
    for target in stmt.targets:
        if isinstance(target, ast.Name) and target.id == name:
            return stmt.value
        if isinstance(target, ast.Tuple) and isinstance(stmt.value, ast.Tuple):
            for t, v in zip(target.elts, stmt.value.elts, strict=False):
                if isinstance(t, ast.Name) and t.id == name:
                    return v
    return None


def attribute_set(src: Source, line: int, attr: str) -> tuple[ast.stmt, str, ast.expr] | None:
    """`OBJ.attr = VALUE` or `setattr(OBJ, "attr", VALUE)` on `line`: (statement, OBJ as written, VALUE)."""
    stmt = src.statement_at(line)
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        target = stmt.targets[0]
        if isinstance(target, ast.Attribute) and target.attr == attr:
            return stmt, src.segment(target.value), stmt.value
    annotated = isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Attribute)
    if annotated and stmt.target.attr == attr and stmt.value is not None:  # type: ignore[union-attr]
        return stmt, src.segment(stmt.target.value), stmt.value  # type: ignore[union-attr]
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    if isinstance(call, ast.Call) and call_name(call.func) == "setattr" and len(call.args) == 3:
        key = call.args[1]
        if isinstance(key, ast.Constant) and key.value == attr and not call.keywords:
            return stmt, src.segment(call.args[0]), call.args[2]
    return None


def in_method(src: Source, line: int, receiver: str) -> bool:
    """`line` is inside a method whose first parameter is `receiver` (`self`)."""
    return any(
        n.lineno <= line <= (n.end_lineno or n.lineno) and n.args.args and n.args.args[0].arg == receiver
        for n in src.nodes((ast.FunctionDef, ast.AsyncFunctionDef))
    )


def enclosing_function(
    src: Source, line: int, outside: ast.AST | None = None
) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The innermost function whose lines hold `line` (other than `outside`)."""
    around = [
        n
        for n in src.nodes((ast.FunctionDef, ast.AsyncFunctionDef))
        if n.lineno <= line <= (n.end_lineno or n.lineno) and n is not outside
    ]
    return max(around, key=lambda n: n.lineno) if around else None


def explicit_dtype(call: ast.Call) -> str | None:
    """`torch.float32` for a call written with `dtype=torch.float32` (its last attribute), else None."""
    for kw in call.keywords:
        if kw.arg == "dtype":
            value = kw.value
            return value.attr if isinstance(value, ast.Attribute) else getattr(value, "id", None)
    return None


def last_assignment(src: Source, name: str, before: int, in_function: bool = False) -> ast.expr | None:
    """The value of the last `name = VALUE` before line `before`; `in_function`: only in the body of
    the function holding `before` (not a nested function's, nor the module's when it is in one)."""
    fn = enclosing_function(src, before) if in_function else None
    best: ast.Assign | None = None
    for node in src.nodes(ast.Assign):
        named = (
            len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) and node.targets[0].id == name
        )
        later = named and node.lineno < before and (best is None or node.lineno > best.lineno)
        if later and (not in_function or enclosing_function(src, node.lineno) is fn):
            best = node
    return best.value if best is not None else None


def borrowed_dtype(call: ast.Call) -> ast.expr | None:
    """The expression a cast takes its dtype from another tensor by: `y.dtype` in `x.to(y.dtype)`
    or `x.to(dtype=y.dtype)`, `y` in `x.type_as(y)`; None for any other call."""
    if not isinstance(call.func, ast.Attribute):
        return None
    if call.func.attr == "type_as" and len(call.args) == 1:
        return call.args[0]
    if call.func.attr != "to":
        return None
    for value in [*call.args, *(k.value for k in call.keywords if k.arg == "dtype")]:
        if isinstance(value, ast.Attribute) and value.attr == "dtype":
            return value
    return None


def already_cast(value: ast.expr, dtype: str) -> bool:
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.attr == "to"
        and (dtype in ast.dump(value))
    )


def scope_statement(src: Source, line: int, innermost_block: bool = False) -> ast.stmt | None:
    """The statement holding `line` that sits directly in its function's (or the module's) body, or
    (`innermost_block`) the innermost statement holding it."""
    if innermost_block:
        return src.statement_at(line)
    scopes = [
        n
        for n in src.nodes((ast.FunctionDef, ast.AsyncFunctionDef))
        if n.lineno <= line <= (n.end_lineno or n.lineno)
    ]
    body = max(scopes, key=lambda n: n.lineno).body if scopes else src.tree.body
    return next((s for s in body if s.lineno <= line <= (s.end_lineno or s.lineno)), None)


def binds_torch(src: Source) -> bool:
    return any(
        isinstance(n, ast.Import) and any((a.asname or a.name) == "torch" for a in n.names)
        for n in src.tree.body
    )


def import_torch(src: Source) -> Edit:
    """`import torch` before the module's first import (after its docstring and __future__ imports)."""
    body = src.tree.body
    first = next(
        (
            n
            for n in body
            if isinstance(n, (ast.Import, ast.ImportFrom)) and getattr(n, "module", "") != "__future__"
        ),
        None,
    )
    if first is None:
        doc = (
            body[0]
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
            else None
        )
        at = src.offset((doc.end_lineno or 1) + 1, 0) if doc is not None else 0
    else:
        at = src.offset(first.lineno, 0)
    return Edit(src.path, at, at, f"import torch{src.newline}")


def block_of(src: Source, stmt: ast.stmt | None) -> list[ast.stmt] | None:
    """The statement list (a body, orelse, ...) that holds `stmt`."""
    if stmt is None:
        return None
    for node in ast.walk(src.tree):
        for name in ("body", "orelse", "finalbody"):
            block = getattr(node, name, None)
            if isinstance(block, list) and any(s is stmt for s in block):
                return block
    return None


def method_calls(stmt: ast.stmt, method: str) -> list[ast.Call]:
    return [
        c
        for c in ast.walk(stmt)
        if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == method
    ]


def calls_method(stmt: ast.stmt, method: str) -> bool:
    return bool(method_calls(stmt, method))


def insert_before(src: Source, line: int, statement: str, block_level: bool = False) -> Edit:
    """`statement` on a line of its own before the statement holding `line`: the one in its function's
    (or the module's) body, or a nested one (inside an `if __name__ == "__main__":`, a `with`) when a
    name the new statement reads is bound only there; `block_level`: the innermost statement."""
    stmt = scope_statement(src, line, innermost_block=block_level) or src.statement_at(line)
    if stmt is not None and not block_level:
        stmt = _where_bound(src, stmt, line, _reads(statement))
    at = stmt.lineno if stmt is not None else line
    start = src.offset(at, 0)
    return Edit(src.path, start, start, f"{src.indent(at)}{statement}{src.newline}")


def _reads(statement: str) -> set[str]:
    try:
        tree = ast.parse(statement)
    except SyntaxError:
        return set()
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def bindings(src: Source) -> dict[str, int]:
    """name -> the first line that binds it (assignment, loop or `with` target, import, def, argument)."""
    first: dict[str, int] = {}

    def bind(name: str, line: int) -> None:
        first[name] = min(line, first.get(name, line))

    for node in ast.walk(src.tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bind(node.id, node.lineno)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                bind((alias.asname or alias.name).split(".")[0], node.lineno)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bind(node.name, node.lineno)
        elif isinstance(node, ast.arg):
            bind(node.arg, node.lineno)
    return first


def _where_bound(src: Source, stmt: ast.stmt, line: int, names: set[str]) -> ast.stmt:
    """`stmt`, or the statement nested in it (down to the one holding `line`) that first comes after
    the bindings of every name in `names`: code inserted before it never reads a name made below."""
    bound = bindings(src)
    while any(bound.get(n, 0) >= stmt.lineno for n in names):
        inner = [
            s
            for field in ("body", "orelse", "finalbody", "handlers")
            for s in getattr(stmt, field, None) or []
            if isinstance(s, ast.stmt) and s.lineno <= line <= (s.end_lineno or s.lineno)
        ]
        if not inner:
            break
        stmt = inner[0]
    return stmt


def autocast_with(src: Source, line: int) -> tuple[ast.With, ast.withitem] | None:
    best: tuple[ast.With, ast.withitem] | None = None
    for node in src.nodes(ast.With):
        if not node.lineno <= line <= (node.end_lineno or node.lineno):
            continue
        for item in node.items:
            expr = item.context_expr
            is_autocast = isinstance(expr, ast.Call) and call_name(expr.func).endswith("autocast")
            if is_autocast and (best is None or node.lineno > best[0].lineno):
                best = (node, item)
    return best


def remove_with_item(src: Source, node: ast.With, item: ast.withitem) -> Edit:
    """Drop one item of a `with` (its comma too), or the whole `with` with its body dedented."""
    items = node.items
    i = items.index(item)
    if len(items) > 1:

        def end_of(it: ast.withitem) -> int:
            return src.span(it.optional_vars or it.context_expr)[1]

        if i + 1 < len(items):
            start, end = src.span(item.context_expr)[0], src.span(items[i + 1].context_expr)[0]
        else:
            start, end = end_of(items[i - 1]), end_of(item)
        return Edit(src.path, start, end, "")
    first = node.body[0].lineno
    header_end = max(item.context_expr.end_lineno or node.lineno, node.lineno)
    cut = len(src.indent(first)) - len(src.indent(node.lineno))
    body = []
    for text in src.lines[header_end : node.end_lineno]:
        body.append(text[cut:] if text[:cut].strip() == "" else text.lstrip())
    start = src.offset(node.lineno, 0)
    end = src.offset(node.end_lineno, 0) + len(src.lines[node.end_lineno - 1])
    return Edit(src.path, start, end, "".join(body))
