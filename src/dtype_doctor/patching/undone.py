"""Edits that complete a decision the code already made or almost made, tried before any cast the
planner would add (`Candidate.first`): a move that left the dtype out (editing/moves.py), a cast an
`if` skipped, a helper's result where the failing function takes it, a dtype value written where it
was chosen, a `dtype` parameter a caller left at its default. Each changes the failing tensor alone, where its dtype was decided. No torch import.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..causes import root_origin
from ..dtypes import FLOATS
from ..editing import finders as find
from ..editing import moves
from ..editing.source import Edit, Source, add_kwarg, call_name, cast_expr, castable
from ..report import Finding, Operand, Origin
from .candidates import Candidate

if TYPE_CHECKING:
    from .plan import Planner


# ---- a move that left the dtype out --------------------------------------------------------
def left_out(planner: Planner, operand: Operand, dtype: str) -> Iterator[Candidate]:
    """`.to(device)` on the operand's way (its variable after its birth, the model's after it was
    built, the argument before the call that failed), given `dtype=`; before it, a cast of the
    variable an `if` skipped (editing/moves.py)."""
    if operand.origin is None:
        return
    root = root_origin(operand.origin)
    found: list[tuple[Source, str, ast.Call | None]] = []
    for origin in [root] if root is operand.origin else [root, operand.origin]:
        src, line = user_line(planner, origin)
        if src is None or line is None:
            continue
        if origin.kind == "input":
            arg = find.argument(find.model_call(src, line), origin.name)
            if isinstance(arg, ast.Call) and moves.without_dtype(arg):  # `model(x.to(device))`
                found.append((src, ast.unparse(arg.func.value), arg))  # type: ignore[attr-defined]
            elif isinstance(arg, (ast.Name, ast.Attribute)):
                name = ast.unparse(arg)
                found.append((src, name, next(moves.moves(src, name, line, False), None)))
            continue
        for name in moves.assigned_names(src, line):
            yield from skipped_cast(planner, src, name, line)
            found.append((src, name, next(moves.moves(src, name, line, True), None)))
    for src, name, call in found:
        if call is not None:
            yield from _given_dtype(src, name, call, dtype)


def moved_on_the_way(planner: Planner, f: Finding, dtype: str) -> Iterator[Candidate]:
    """`.to(device)` with no dtype on the failing value's way to a failing line of the user's: the
    names that line reads, followed back through their assignments in its function (the table a
    method moves to the sample's device and indexes later), the nearest move before the use."""
    seen: set[int] = set()
    for src, line in reversed(planner.user_places(f)):  # the failing line first, then the call
        for name in moves.read_back(src, line):
            call = next(moves.moves(src, name, line, False), None)
            if call is not None and id(call) not in seen:
                seen.add(id(call))
                yield from _given_dtype(src, name, call, dtype)


def _given_dtype(src: Source, name: str, call: ast.Call, dtype: str) -> Iterator[Candidate]:
    """The move given a dtype: the dtype of the tensor whose device it follows (`.to(x.device)` ->
    `dtype=x.dtype`), else the function's own dtype parameter, then the literal (in case either
    holds another dtype), each re-run."""
    where = f"{src.path}:{call.lineno}"
    values = []
    device = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "device"), None)
    if isinstance(device, ast.Attribute) and device.attr == "device" and isinstance(device.value, ast.Name):
        values.append(f"{device.value.id}.dtype")
    own = moves.dtype_parameter(src, call.lineno)
    values += [v for v in (own, f"torch.{dtype}") if v]
    for value in dict.fromkeys(values):
        edit = add_kwarg(src, call, "dtype", value)
        if edit is not None:
            yield Candidate(
                f"give the `.to()` that moves `{name}` the dtype it leaves out: dtype={value} ({where})",
                [edit],
                first=True,
            )


def user_line(planner: Planner, origin: Origin) -> tuple[Source | None, int | None]:
    """Where `origin` was made in a user file: its own line, else (made in a library) the user's
    line that called it."""
    src = planner.source(origin.file)
    if src is not None:
        return src, origin.line
    call = next((c for c in origin.chain if c.kind == "call" and planner.source(c.file)), None)
    return (planner.source(call.file), call.line) if call is not None else (None, None)


def skipped_cast(planner: Planner, src: Source, name: str, line: int) -> Iterator[Candidate]:
    """`if COND: name = name.to(dtype=...)` after the line that made `name`, not taken (the
    tensor arrived uncast): the code's own cast, run whatever COND says (in the `if`'s place when
    it guarded nothing else, else right after it)."""
    for test, cast in moves.skipped_casts(src, name, line):
        if len(test.body) == 1:  # the `if` only guarded the cast: the cast in its place
            start, end = src.span(test)
            edit = Edit(src.path, start, end, src.segment(cast))
        else:  # the cast again after the block
            end = src.offset((test.end_lineno or test.lineno) + 1, 0)
            edit = Edit(src.path, end, end, f"{src.indent(test.lineno)}{src.segment(cast)}{src.newline}")
        yield Candidate(
            f"run the cast of `{name}` at {src.path}:{cast.lineno}, which the `if` at "
            f"{src.path}:{test.lineno} skipped, whatever its condition",
            [edit],
            first=True,
        )


# ---- a helper's result: cast where it comes back into the code that failed ---------------------
def from_helper(planner: Planner, f: Finding, operand: Operand, dtype: str) -> Iterator[Candidate]:
    """The operand was made inside a function of the user's (`mask = make_mask(n)`) and failed in
    another: its result cast where the failing function calls it, changing this use alone (the
    helper's other callers keep what they get)."""
    root = root_origin(operand.origin) if operand.origin is not None else None
    src = planner.source(root.file if root is not None else None)
    loc = f.location
    if root is None or src is None or root.line is None or loc is None or loc.line is None:
        return
    helper = find.enclosing_function(src, root.line)
    if helper is None or planner.source(loc.file) is not src:
        return
    outer = find.enclosing_function(src, loc.line)
    while outer is not None and (up := find.enclosing_function(src, outer.lineno, outside=outer)):
        outer = up  # the outermost function around the failing line: its nested helpers' callers too
    if outer is helper or (outer is not None and outer.lineno <= helper.lineno <= (outer.end_lineno or 0)):
        return  # made in the failing function itself: cast_tensor's
    first, last = (outer.lineno, outer.end_lineno or outer.lineno) if outer else (1, len(src.lines))
    calls = [
        c
        for c in src.nodes(ast.Call)
        if first <= c.lineno <= last and call_name(c.func).rsplit(".", 1)[-1] == helper.name
    ]
    call = calls[0] if len(calls) == 1 else None
    stmt = src.statement_at(call.lineno) if call is not None else None
    if call is None or stmt is None:
        return
    where = f"{src.path}:{stmt.lineno}"
    whole = isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and stmt.value is call
    if not whole:  # `return torch.matmul(x, self.dequantize().t())`: the helper's result alone
        yield Candidate(
            f"cast what `{src.segment(call)}` returns to {dtype} where `{outer.name if outer else 'the code'}` "
            f"takes it ({where})",
            [cast_expr(src, call, dtype)],
            first=True,
        )
    elif isinstance(stmt, ast.Assign) and castable(stmt.value) and not find.already_cast(stmt.value, dtype):
        name = ast.unparse(stmt.targets[0])
        yield Candidate(
            f"cast `{name}` to {dtype} where it comes back from `{helper.name}` ({where})",
            [cast_expr(src, stmt.value, dtype)],
            first=True,
        )


def at_value(planner: Planner, origin: Origin, dtype: str) -> Iterator[Candidate]:
    """The dtype written where a value was chosen (`dtype, device = torch.float32, x.device`), made
    the wanted one: every tensor made with that value follows."""
    src = planner.source(origin.file)
    stmt = src.statement_at(origin.line) if src is not None and origin.line is not None else None
    if src is None or not isinstance(stmt, ast.Assign) or not origin.name:
        return
    value = find.assigned_part(stmt, origin.name)
    literal = isinstance(value, ast.Attribute) and ast.unparse(value).startswith("torch.")
    if literal and value.attr != dtype and value.attr in FLOATS:  # type: ignore[union-attr]
        start, end = src.span(value)  # type: ignore[arg-type]
        yield Candidate(
            f"choose {dtype} where `{origin.name}` is set ({src.path}:{stmt.lineno})",
            [Edit(src.path, start, end, f"torch.{dtype}")],
        )


def made_with_value(origin: Origin) -> Origin | None:
    """The tensor on the lineage made with a dtype value chosen elsewhere (its chain holds the value)."""
    todo = [origin]
    while todo:
        current = todo.pop(0)
        if current.kind in ("op", "cast") and any(c.kind == "value" for c in current.chain):
            return current
        todo.extend(current.chain)
    return None


# ---- a dtype parameter its caller left at the default ----------------------------------------
def defaulted_parameter(planner: Planner, origin: Origin, dtype: str) -> Iterator[Candidate]:
    """The tensor was made with `dtype=NAME` where NAME is a parameter of the function around it that
    has a default (`def __init__(self, x, dtype=torch.float32)`), and a caller left it out: each
    such call of the user's given the dtype, the tensor whose device it passes first (`device=t.device`
    -> `dtype=t.dtype`), then the literal."""
    src = planner.source(origin.file)
    if src is None or origin.line is None:
        return
    func = find.enclosing_function(src, origin.line)
    if func is None:
        return
    made = [c for c in find.calls_on(src, origin.line) if c.lineno == origin.line]
    names = {
        k.value.id for c in made for k in c.keywords if k.arg == "dtype" and isinstance(k.value, ast.Name)
    }
    param = next((p for p in _defaulted(func) if p in names), None)
    callee = _callee_name(src, func)
    if param is None or callee is None:
        return
    sites = [c for c in src.nodes(ast.Call) if _calls(c, callee) and not _passes(c, func, param)]
    by_partner: list[Edit] = []  # `dtype=t.dtype` where the call passes `device=t.device`
    by_literal: list[Edit] = []
    for call in sites:
        partner = find.device_partner(call)
        edit = add_kwarg(src, call, param, f"{partner}.dtype", beside_kwargs=True) if partner else None
        by_partner += [edit] if edit is not None else []
        edit = add_kwarg(src, call, param, f"torch.{dtype}", beside_kwargs=True)
        by_literal += [edit] if edit is not None else []
    lines = ", ".join(str(c.lineno) for c in sites)
    made = f"`{origin.name}`" if origin.name else "the tensor"
    for what, edits in (
        (f"`{param}=` of the tensor whose device it passes", by_partner),
        (f"`{param}=torch.{dtype}`", by_literal),
    ):
        if edits:
            yield Candidate(
                f"pass {what} where `{callee}` is called ({src.path}:{lines}): it was left at its "
                f"default, which made {made} at line {origin.line} {origin.dtype}",
                edits,
                first=True,
            )


def _defaulted(func: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """The parameters of `func` that have a default value."""
    args = func.args
    positional = [*args.posonlyargs, *args.args]
    named = [a.arg for a in positional[len(positional) - len(args.defaults) :]]
    return named + [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None]


def _callee_name(src: Source, func: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """How callers name `func`: its class for an `__init__`, else its own name."""
    if func.name != "__init__":
        return func.name
    owner = next(
        (c for c in src.nodes(ast.ClassDef) if any(b is func for b in c.body)),  # type: ignore[attr-defined]
        None,
    )
    return owner.name if owner is not None else None  # type: ignore[attr-defined]


def _calls(call: ast.Call, callee: str) -> bool:
    return call_name(call.func).rsplit(".", 1)[-1] == callee


def _passes(call: ast.Call, func: ast.FunctionDef | ast.AsyncFunctionDef, param: str) -> bool:
    """The call writes `param` out, by keyword or by position (`*args`/`**kwargs` may carry it or
    not: the re-run of the edit tells)."""
    if any(k.arg == param for k in call.keywords):
        return True
    positional = [a.arg for a in [*func.args.posonlyargs, *func.args.args]]
    if positional and positional[0] in ("self", "cls"):
        positional = positional[1:]
    written = next((i for i, a in enumerate(call.args) if isinstance(a, ast.Starred)), len(call.args))
    return param in positional and positional.index(param) < written
