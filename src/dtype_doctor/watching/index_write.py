"""An indexed write whose values autocast made half (`inputs_embeds.index_put(pos, image_embeds...)`
under bf16 autocast, the destination an fp32 embedding lookup, which autocast leaves alone): the dtype
is autocast's by design, so the fix is at the seam, the written values cast to the destination's dtype
where the user's line writes them, read off the destination so that it holds with autocast on or off.
"""

from __future__ import annotations

import ast
from types import FrameType

from .. import remedies
from ..catalog.shared_remedies import CAST_AT_WRITE
from ..numerics.opsource import statement
from ..report import Fix
from .provenance import short_path

# the index writes whose last argument (or `values`/`source`/`src`) is what is written
_WRITES = frozenset(
    f"{name}{tail}"
    for name in (
        "index_put",
        "index_add",
        "index_copy",
        "scatter",
        "scatter_add",
        "scatter_reduce",
        "masked_scatter",
    )
    for tail in ("", "_")
)
_VALUE_KEYWORDS = ("values", "source", "src", "value")


def _named(dest: ast.expr) -> bool:
    """`dest` is a name or an attribute chain: its `.dtype` is read where the write is, not recomputed.
    A destination made on the line (`h.new_zeros(...)`) has no name to read; the dtype seen at the
    failure is no answer either: it may change between iterations of a loop."""
    node = dest
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _cast(expr: ast.expr, dest: ast.expr) -> ast.expr:
    return ast.Call(ast.Attribute(expr, "to", ast.Load()), [ast.Attribute(dest, "dtype", ast.Load())], [])


def _rewrite(stmt: ast.stmt) -> tuple[str, str] | None:
    """(the statement with the written values cast to the destination's dtype, the destination)."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Subscript):
        dest = stmt.targets[0].value  # `dest[idx] = v`
        if not _named(dest):
            return None
        stmt.value = _cast(stmt.value, dest)
        return ast.unparse(stmt), ast.unparse(dest)
    for node in ast.walk(stmt):
        if not (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _WRITES
        ):
            continue
        receiver = node.func.value
        function = isinstance(receiver, ast.Name) and receiver.id == "torch"
        dest = node.args[0] if function and node.args else receiver
        if not _named(dest):
            return None
        keyword = next((k for k in node.keywords if k.arg in _VALUE_KEYWORDS), None)
        if keyword is not None:
            keyword.value = _cast(keyword.value, dest)
        elif len(node.args) >= (3 if function else 2):
            node.args[-1] = _cast(node.args[-1], dest)
        else:
            continue
        return ast.unparse(stmt), ast.unparse(dest)
    return None


def seam_fix(frame: FrameType | None, have: str | None) -> Fix | None:
    """The user's failing line (run in `frame`), its written values cast to the destination's dtype."""
    if frame is None:
        return None
    found = statement(frame.f_code.co_filename, frame.f_lineno)
    if found is None or found[1].lineno != found[1].end_lineno:
        return None  # one line replaced by one line
    done = _rewrite(found[1])
    if done is None:
        return None
    made, dest = done
    indent = found[0][: len(found[0]) - len(found[0].lstrip())]
    file = short_path(frame.f_code.co_filename)
    return remedies.make(
        CAST_AT_WRITE, file=file, line=found[1].lineno, made=indent + made, dest=dest, have=have or "?"
    )
