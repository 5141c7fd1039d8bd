"""How a shown fix is pasted "at FILE:LINE", as a user reads it: the one rule the patcher
(`Planner.pasted`) and the measuring script `scripts/fix_by_hand.py` both follow.

At the statement holding LINE, indented like it:
- a snippet statement that assigns what the line assigns (`x = ...` at `x = ...`) replaces the line
  (the line rewritten); a cast of it, `x = x.to(...)`, goes after it instead, or before it when the
  line reads x to make it (`x = x.scatter_(...)`: the line then reads the cast x);
- a `return` at a `return`, a call statement at a call of the same function, replaces the line;
- a snippet that repeats the line's statement (`s = s.float()` then the line itself) replaces it, the
  line keeping its own text (comments, formatting) where the snippet repeats it;
- a `register_...` call at an assignment replaces it (the attribute becomes a buffer where it was set);
- anything else goes before the line.

A fix that edits several places shows each later part under a `# and at FILE:LINE:` line; each part
is pasted by the same rule at its own line (`parts`, `paste_all`).

Standard library only, and nothing from the package: the measuring script loads this file by path.
"""

from __future__ import annotations

import ast
import os
import re

from ..tracing.casts import cast_call


def _targets(stmt: ast.stmt) -> set[str]:
    out: set[str] = set()
    if isinstance(stmt, ast.Assign):
        targets = stmt.targets
    elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
        targets = [stmt.target]
    else:
        targets = []
    for t in targets:
        out.add(ast.unparse(t))
    return out


def _recasts(stmt: ast.stmt) -> bool:
    """`x = x.to(...)` (`x.float()`, `x.data.half()`, ...): the snippet casts what the line made, so it
    goes after it; any other assignment to the line's target (`s = e if s is None else s.float() + e`,
    `x = torch.clamp(x.float(), ...)`) is the line rewritten, read as "instead of it"."""
    value = getattr(stmt, "value", None)
    while cast_call(value):
        value = value.func.value
        if isinstance(value, ast.Attribute) and value.attr == "data":
            value = value.value
    return value is not getattr(stmt, "value", None) and bool(_targets(stmt) & {ast.unparse(value)})


def _reads_target(stmt: ast.stmt) -> bool:
    """The line makes x from x (`x = x.scatter_(...)`, `x = f(x)`) and is not itself a cast of it:
    a cast of x pasted there goes before it, where the line reads it."""
    value = getattr(stmt, "value", None)
    if value is None or _recasts(stmt):
        return False
    targets = _targets(stmt)
    return any(
        isinstance(n, (ast.Name, ast.Attribute)) and ast.unparse(n) in targets for n in ast.walk(value)
    )


def _same_call(a: ast.stmt, b: ast.stmt) -> bool:
    """Both assign the result of the same function (`x = torch.clamp(x.float(), ...)` at
    `x = torch.clamp(x, ...)`): the snippet is the line rewritten."""
    va, vb = getattr(a, "value", None), getattr(b, "value", None)
    return (
        isinstance(va, ast.Call) and isinstance(vb, ast.Call) and ast.unparse(va.func) == ast.unparse(vb.func)
    )


def _statement(tree: ast.Module, line: int) -> ast.stmt | None:
    """The innermost statement whose lines hold `line`."""
    around = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.stmt) and n.lineno <= line <= (n.end_lineno or n.lineno)
    ]
    return min(around, key=lambda n: (n.end_lineno or n.lineno) - n.lineno) if around else None


def _redecorated(stmt: ast.stmt | None, first: ast.stmt) -> ast.FunctionDef | None:
    """`stmt` when the snippet's first statement is the same function shown as its decorators and
    signature over a body of `...` (`@staticmethod @custom_bwd(...) def backward(ctx, g): ...`)."""
    if not isinstance(stmt, ast.FunctionDef) or not isinstance(first, ast.FunctionDef):
        return None
    body = first.body
    only_dots = len(body) == 1 and isinstance(body[0], ast.Expr) and getattr(body[0].value, "value", 0) is ...
    return stmt if first.name == stmt.name and only_dots else None


def _wraps(first: ast.stmt, stmt: ast.stmt | None) -> bool:
    """The snippet is a `with` block whose one statement is the line rewritten (it assigns the same
    names, or returns as the line does): `with torch.autocast(..., enabled=False): x = a.float() @ b`."""
    if not isinstance(first, ast.With) or len(first.body) != 1 or stmt is None:
        return False
    inner = first.body[0]
    if isinstance(inner, ast.Return) and isinstance(stmt, ast.Return):
        return True
    same_kind = isinstance(inner, (ast.Assign, ast.AnnAssign)) and isinstance(
        stmt, (ast.Assign, ast.AnnAssign)
    )
    return same_kind and bool(_targets(inner)) and _targets(inner) == _targets(stmt)


def code_lines(snippet: str) -> list[str]:
    """The snippet's lines that are code (not blank, not only a comment)."""
    return [ln for ln in snippet.splitlines() if ln.split("#")[0].strip()]


def paste_span(text: str, line: int, snippet: str) -> tuple[int, int, str]:
    """(start, end, new): the character span of `text` that pasting `snippet` at `line` (1-based)
    replaces, and what it becomes. SyntaxError when the text or the snippet does not parse,
    IndexError when `line` is past the end."""
    lines = text.splitlines(keepends=True)
    if not 1 <= line <= len(lines):
        raise IndexError(f"line {line} is not in a {len(lines)}-line file")
    body_nodes = ast.parse(snippet).body
    if not body_nodes:
        raise SyntaxError("the snippet has no statement")
    stmt = _statement(ast.parse(text), line)
    at = stmt.lineno if stmt is not None else line
    end = (stmt.end_lineno or at) if stmt is not None else at
    newline = "\r\n" if lines[0].endswith("\r\n") else "\n"
    indent = re.match(r"[ \t]*", lines[at - 1]).group(0)  # type: ignore[union-attr]
    own = "".join(lines[at - 1 : end])
    if own and not own.endswith(("\n", "\r")):
        own += newline
    snippet_lines = snippet.splitlines()

    def block(rows: list[str]) -> str:
        return "".join((indent + r if r.strip() else "") + newline for r in rows)

    starts = [0]
    for ln in lines:
        starts.append(starts[-1] + len(ln))
    first = body_nodes[0]
    if stmt is not None:
        same = next((n for n in body_nodes if ast.unparse(n) == ast.unparse(stmt)), None)
        if same is not None:  # the snippet shows the line in context: it replaces the line
            before = snippet_lines[: same.lineno - 1]
            after = snippet_lines[(same.end_lineno or same.lineno) :]
            return starts[at - 1], starts[end], block(before) + own + block(after)
    redecorated = _redecorated(stmt, first)
    if redecorated is not None:  # the function's decorators and signature, body `...`: its decorators
        start = min((d.lineno for d in redecorated.decorator_list), default=redecorated.lineno)
        rows = (
            snippet_lines[first.decorator_list[0].lineno - 1 : first.lineno - 1]
            if first.decorator_list
            else []
        )
        return starts[start - 1], starts[redecorated.lineno - 1], block(rows)
    new = block(snippet_lines)
    if len(body_nodes) == 1 and _wraps(first, stmt):  # `with ...:` around the line rewritten: instead of it
        return starts[at - 1], starts[end], new
    if (
        stmt is not None
        and isinstance(stmt, (ast.Assign, ast.AnnAssign))
        and _targets(first) & _targets(stmt)
    ):
        if _recasts(first) and _reads_target(stmt):  # `x = x.scatter_(...)`: the line reads the cast x
            return starts[at - 1], starts[at - 1], new
        if _recasts(first):  # x = x.to(...): after the line that made x
            return starts[end], starts[end], new
        return starts[at - 1], starts[end], new  # a new way to make x: instead of it
    rewrites = isinstance(first, ast.Return) and isinstance(stmt, ast.Return)
    if rewrites or (isinstance(first, ast.Expr) and isinstance(stmt, ast.Expr) and _same_call(first, stmt)):
        return starts[at - 1], starts[end], new  # `return f(x.float())` at `return f(x)`: the line rewritten
    registers = isinstance(first, ast.Expr) and "register_" in ast.unparse(first)
    if registers and stmt is not None and isinstance(stmt, ast.Assign):
        return starts[at - 1], starts[end], new
    return starts[at - 1], starts[at - 1], new


def paste(text: str, line: int, snippet: str) -> str:
    """`text` with `snippet` pasted at `line` (1-based) the way a user reads "at FILE:LINE"."""
    start, end, new = paste_span(text, line, snippet)
    return text[:start] + new + text[end:]


_PART = re.compile(r"^\s*#\s*and at\s+(\S+\.py):(\d+):?\s*$")


def parts(snippet: str) -> list[tuple[str | None, int | None, str]]:
    """(file, line, code) of each part of a snippet: the first at the fix's own place (None, None),
    each later one at the `# and at FILE:LINE:` line that heads it. Parts without code are dropped."""
    found: list[tuple[str | None, int | None, list[str]]] = [(None, None, [])]
    for row in snippet.splitlines():
        head = _PART.match(row)
        if head:
            found.append((head.group(1), int(head.group(2)), []))
        else:
            found[-1][2].append(row)
    return [(f, n, "\n".join(rows)) for f, n, rows in found if code_lines("\n".join(rows))]


def paste_all(text: str, name: str, line: int, snippet: str) -> str:
    """`text` (the file `name`) with each part of `snippet` meant for it pasted: the first at `line`,
    a later one at its own line when its FILE is this file (by its base name)."""
    spans = [
        paste_span(text, at or line, code)
        for file, at, code in parts(snippet)
        if file is None or os.path.basename(file) == os.path.basename(name)
    ]
    for start, end, new in sorted(spans, reverse=True):
        text = text[:start] + new + text[end:]
    return text
