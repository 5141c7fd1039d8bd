"""Which calls are in place (they write their result into their first operand), and the call each
one is the in-place form of: `add_` of `add`, `__iadd__` of `__add__`. No torch import."""

from __future__ import annotations

# dunders that start with `__i` and are no in-place operator
_NOT_IN_PLACE = frozenset({"__init__", "__index__", "__int__", "__invert__", "__iter__"})


def in_place(name: str) -> tuple[str, bool]:
    """(the out-of-place name, whether the call is in place) of a call's name (a qualified one's
    last part): `add_` → ("add", True), `Tensor.__iadd__` → ("__add__", True), `add` → ("add", False)."""
    name = name.rpartition(".")[2]
    if name.startswith("__i") and name.endswith("__") and name not in _NOT_IN_PLACE:
        return "__" + name[3:], True
    if name.endswith("_") and not name.endswith("__"):
        return name[:-1], True
    return name, False
