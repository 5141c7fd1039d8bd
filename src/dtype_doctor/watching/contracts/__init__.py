"""Op contracts: which operands of which op must agree in dtype, declared per op group.

`core` holds the registry (Contract, `register`, `@rule`, `judge`); each op-group module declares its
ops with `register(...)` next to the rule that is theirs, as torch's flop_counter registers per-op
formulas. Importing this package loads every group, so CONTRACTS is complete. The rules follow what
each op does on torch 2.13, probed op by op.
"""

from __future__ import annotations

# each group registers its contracts on import
from . import attention, conv, indexing, lists, matmul, norm, scalar  # noqa: F401
from .core import (
    CONTRACTS,
    LOW_DTYPES,
    RULES,
    Contract,
    Mismatch,
    Scene,
    Slot,
    bind,
    evaluate,
    judge,
    put,
    register,
    rule,
    under_autocast,
)

__all__ = [
    "CONTRACTS",
    "LOW_DTYPES",
    "RULES",
    "Contract",
    "Mismatch",
    "Scene",
    "Slot",
    "bind",
    "evaluate",
    "judge",
    "put",
    "register",
    "rule",
    "under_autocast",
]
