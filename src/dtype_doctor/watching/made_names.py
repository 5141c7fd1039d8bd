"""Whether the variable a line assigns holds the tensor an op on that line made.

`x = torch.tensor(feats)` keeps the tensor in `x`; `ds = TensorDataset(torch.from_numpy(a))` and
`h = self.proj(x.float())` do not: the op's result is an argument of another call, and a fix
`ds = ds.to(...)` would cast a dataset. The op holds the variable when it is on the spine of the
assigned expression: its outermost call, or a call that a method, an index or arithmetic is applied to.
"""

from __future__ import annotations

import ast
import functools


def _spine(node: ast.AST) -> list[str]:
    """The function names called along the expression's spine (`a.b(c)[0].float()` → float, b)."""
    names: list[str] = []
    while True:
        if isinstance(node, ast.Call):
            func = node.func
            names.append(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
            node = func.value if isinstance(func, ast.Attribute) else func
        elif isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
            node = node.value
        else:
            return names


@functools.lru_cache(maxsize=4096)
def holds(source: str, op: str) -> bool:
    """True unless the line's assigned value is a call that takes the op's result as an argument
    (unknown lines, arithmetic and comparisons hold it: the result flows into the variable)."""
    short = op.rsplit(".", 1)[-1]
    try:
        node = ast.parse(source.strip())
    except SyntaxError:
        return True  # a statement over several lines: as before
    if not node.body or not isinstance(node.body[0], (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        return True
    value = node.body[0].value
    if value is None or not isinstance(value, ast.Call) or short not in source:
        return True
    return short in _spine(value)
