"""The names a snippet needs, and the names the user's file has at the line it is pasted at.

A snippet is a statement in the user's names: every name it reads before binding it exists where it
is pasted (or is `torch`, which `--write` imports), and every name it assigns is one the program
goes on to use (the snippet's own later lines, or the user's file). `unresolved` says which names
break that, read off the source with `ast` (no torch import): a name the place lacks is a NameError
when pasted, a name assigned and never read is a result thrown away (`y = layer(x)`).
"""

from __future__ import annotations

import ast
import builtins
import functools
from collections.abc import Iterable, Iterator

from ..editing.source import file_stamp
from .places import parsed_tree, tree_of

# names a pasted snippet may read without the file binding them: builtins, and torch, which an edit
# that writes `torch.` into a file without it imports (patching)
_BUILTINS = frozenset(dir(builtins))
ALWAYS = _BUILTINS | {"torch", "__file__", "__name__"}

_NAMED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.ExceptHandler, ast.MatchAs, ast.MatchStar)
_Scope = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef


def _target_names(node: ast.AST) -> Iterator[str]:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store | ast.Del):
            yield sub.id


def _own_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """The nodes of `node`'s own scope: nested functions, lambdas and classes are not entered (their
    names are bound, their bodies are theirs), comprehensions are."""
    todo = list(ast.iter_child_nodes(node))
    while todo:
        sub = todo.pop()
        yield sub
        if not isinstance(sub, _Scope):
            todo.extend(ast.iter_child_nodes(sub))


def bound_by(node: ast.AST) -> set[str]:
    """The names a statement binds in the scope it is in (a `def` or `class` binds its name)."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {node.name}
    return _binds([node, *_own_nodes(node)])


def local_names(scope: ast.AST) -> set[str]:
    """The names a module's or a function's body binds in its own scope."""
    return _binds(_own_nodes(scope))


def _binds(nodes: Iterable[ast.AST]) -> set[str]:
    out: set[str] = set()
    for sub in nodes:
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
            out.add(sub.id)
        elif isinstance(sub, ast.Import | ast.ImportFrom):
            out.update((a.asname or a.name).split(".")[0] for a in sub.names if a.name != "*")
        elif isinstance(sub, ast.Global | ast.Nonlocal):
            out.update(sub.names)
        elif isinstance(sub, _NAMED) and sub.name:  # def, class, `except E as e`, `case x`
            out.add(sub.name)
    return out


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    args = node.args
    named = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
    return {a.arg for a in named if a is not None}


def _local_reads(node: ast.AST, local: set[str]) -> set[str]:
    """Names `node` reads that are not bound inside it: lambdas' parameters and comprehensions'
    variables are theirs."""
    reads: set[str] = set()
    inner = set(local)
    for sub in ast.walk(node):
        if isinstance(sub, ast.Lambda | ast.FunctionDef | ast.AsyncFunctionDef):
            inner |= _parameters(sub)
        elif isinstance(sub, ast.comprehension):
            inner |= set(_target_names(sub.target))
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load) and sub.id not in inner:
            reads.add(sub.id)
    return reads


@functools.lru_cache(maxsize=256)
def snippet_names(snippet: str) -> tuple[frozenset[str], frozenset[str]] | None:
    """(needed, discarded) of a Python snippet, None when it does not parse: the names it reads
    before it binds them (builtins aside), and the names it assigns that none of its later lines
    reads. A lambda's parameters and a comprehension's variables are its own."""
    try:
        tree = ast.parse(snippet)
    except SyntaxError:
        return None
    needed: set[str] = set()
    bound: set[str] = set()
    assigned: dict[str, int] = {}
    for i, stmt in enumerate(tree.body):
        defined = (
            bound_by(stmt) if not isinstance(stmt, ast.Assign | ast.AugAssign | ast.AnnAssign) else set()
        )
        needed |= _local_reads(stmt, bound | defined)
        if isinstance(stmt, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for target in targets:
                for name in _target_names(target):
                    assigned[name] = i
        bound |= bound_by(stmt)
    discarded = {
        name
        for name, i in assigned.items()
        if not any(name in _local_reads(stmt, set()) for stmt in tree.body[i + 1 :])
    }
    return frozenset(needed - _BUILTINS), frozenset(discarded)


def _enclosing_scopes(tree: ast.Module, line: int) -> list[ast.AST]:
    """The functions and classes around `line`, outermost first."""
    out: list[ast.AST] = []
    node: ast.AST = tree
    while True:
        inner = next(
            (
                sub
                for sub in _own_nodes(node)
                if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                and _first_line(sub) <= line <= (sub.end_lineno or sub.lineno)
            ),
            None,
        )
        if inner is None:
            return out
        out.append(inner)
        node = inner


def _first_line(node: ast.AST) -> int:
    decorators = getattr(node, "decorator_list", [])
    return min([getattr(node, "lineno", 0), *(d.lineno for d in decorators)])


def _bound_before(scope: ast.AST, line: int) -> set[str]:
    """The names `scope`'s own statements bind on lines up to `line` (a statement holding `line`
    binds what its header binds: a loop's variable exists in its body)."""
    out: set[str] = set()
    for sub in _own_nodes(scope):
        if isinstance(sub, ast.stmt) and sub.lineno <= line:
            if (sub.end_lineno or sub.lineno) <= line or not hasattr(sub, "body"):
                out |= bound_by(sub)
            else:
                out |= _header_names(sub)
    return out


def _header_names(stmt: ast.stmt) -> set[str]:
    if isinstance(stmt, ast.For | ast.AsyncFor):
        return set(_target_names(stmt.target))
    if isinstance(stmt, ast.With | ast.AsyncWith):
        return {n for item in stmt.items if item.optional_vars for n in _target_names(item.optional_vars)}
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {stmt.name}
    return set()


def names_at(path: str, line: int) -> frozenset[str] | None:
    """The names a snippet pasted at `path`:`line` may read (None: the file cannot be parsed).

    At module level, what the module's statements bound up to that line (and the line's own: a
    cast of what it makes goes after it); inside a function, every name the module binds (the
    function runs after it) and the enclosing functions' parameters and locals; a method does not
    see its class body."""
    tree = tree_of(path)
    if tree is None:
        return None
    scopes = _enclosing_scopes(tree, line)
    functions = [s for s in scopes if not isinstance(s, ast.ClassDef)]
    if not scopes:
        return frozenset(_bound_before(tree, line))
    names = local_names(tree)
    for scope in functions:
        names |= _parameters(scope) | local_names(scope)  # type: ignore[arg-type]
    if isinstance(scopes[-1], ast.ClassDef):
        names |= _bound_before(scopes[-1], line)
    return frozenset(names)


def module_names(path: str) -> frozenset[str] | None:
    """The names the file's module level binds: all a snippet with no line may read (None: it
    cannot be parsed); a function's parameters and locals exist only at its lines."""
    tree = tree_of(path)
    return frozenset(local_names(tree)) if tree is not None else None


def file_names(path: str) -> frozenset[str] | None:
    """Every name the file binds or reads anywhere (None: it cannot be parsed)."""
    return _names_at(file_stamp(path))


@functools.lru_cache(maxsize=64)
def _names_at(stamp: tuple) -> frozenset[str] | None:
    tree = parsed_tree(stamp)
    if tree is None:
        return None
    found = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    found |= local_names(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            found |= _parameters(node) | (local_names(node) if not isinstance(node, ast.Lambda) else set())
    return frozenset(found)


def _star_import(path: str) -> bool:
    """The file does `from x import *`: which names it has is not written in it."""
    tree = tree_of(path)
    return tree is not None and any(
        isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names) for n in ast.walk(tree)
    )


def unresolved(snippet: str, path: str, line: int | None) -> list[str]:
    """Why the snippet is not a statement in the user's names at `path`:`line` (with no line: at
    the module level, anywhere), one phrase per name; empty when it is, or when the file cannot be read."""
    names = snippet_names(snippet)
    everywhere = file_names(path)
    here = names_at(path, line) if line else module_names(path)
    if names is None or here is None or everywhere is None:
        return []
    needed, discarded = names
    where = f"{path}:{line}" if line else path
    missing = needed - here - ALWAYS if not _star_import(path) else set()
    out = [f"`{n}`, which {where} does not have" for n in sorted(missing)]
    out += [f"`{n}`, assigned and never used" for n in sorted(discarded - everywhere - missing)]
    return out


def unbound_at(path: str, line: int, snippet: str) -> tuple[str, str] | None:
    """(name, function) when the snippet reads a name before it assigns it (`model = model.float()`)
    and, pasted at `line` inside a function that does not bind that name, would make it that
    function's local, read before assignment (UnboundLocalError). None when it would not, or when
    the source or the snippet cannot be read. A name the snippet binds first (`for p in ...`) is
    its own."""
    names = snippet_names(snippet)
    tree = tree_of(path)
    if names is None or tree is None:
        return None
    funcs = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.lineno < line <= (n.end_lineno or 0)
    ]
    if not funcs:
        return None
    func = max(funcs, key=lambda n: n.lineno)
    unbound = sorted(names[0] & local_names(ast.parse(snippet)) - _parameters(func) - local_names(func))
    return (unbound[0], func.name) if unbound else None


def phrase(problems: Iterable[str]) -> str:
    """`names `x`, which a.py:3 does not have; `y`, assigned and never used`."""
    return "its code names " + "; ".join(problems)
