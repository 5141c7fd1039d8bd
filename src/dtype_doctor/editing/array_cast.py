"""A NumPy array made in another dtype where it is assigned: `.astype(np.float32)` after the value.

`self.x = np.stack(windows)[..., None]` makes float64 (NumPy's default); every tensor converted
from it keeps that. The assignment is rewritten so the array is made in the dtype the model wants,
with the file's own name for NumPy. No torch import.
"""

from __future__ import annotations

import ast

from .birth_line import user_source
from .source import Edit, Source, apply, is_atom


def numpy_alias(tree: ast.Module) -> str | None:
    """The name the file imports NumPy under (`np` for `import numpy as np`), None when it does not."""
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "numpy":
                    return alias.asname or "numpy"
    return None


def astype_edit(src: Source, line: int, dtype: str) -> Edit | None:
    """The edit making the value assigned at `line` `dtype` by `.astype(np.DTYPE)`, or None: not an
    assignment, NumPy not imported by name, or a value already `.astype`'d."""
    stmt = src.statement_at(line)
    if not isinstance(stmt, (ast.Assign, ast.AnnAssign)) or stmt.value is None:
        return None
    alias = numpy_alias(src.tree)
    value = stmt.value
    if alias is None or "astype" in {n.attr for n in ast.walk(value) if isinstance(n, ast.Attribute)}:
        return None
    start, end = src.span(value)
    text = src.text[start:end] if is_atom(value) else f"({src.text[start:end]})"
    return Edit(src.path, start, end, f"{text}.astype({alias}.{dtype})")


def astype_at(path: str | None, line: int, dtype: str) -> tuple[str, int] | None:
    """(the assignment at `line` with its value made `dtype`, its first line), or None."""
    src = user_source(path)
    stmt = src.statement_at(line) if src is not None else None
    edit = astype_edit(src, line, dtype) if src is not None else None
    if src is None or stmt is None or edit is None:
        return None
    s_start, s_end = src.span(stmt)
    moved = Edit(edit.path, edit.start - s_start, edit.end - s_start, edit.text)
    return apply(src.text[s_start:s_end], [moved]), stmt.lineno
