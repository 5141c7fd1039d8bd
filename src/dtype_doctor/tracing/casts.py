"""The one vocabulary of dtype casts: the method names that convert a tensor's or a module's dtype.

Every part that asks "is this call a cast?" (the watch's dispatch, numerics' op checks, the
experiment's interventions, the source readers) takes its set from here; the subsets below are
views of the one set, named by the question they answer.
"""

from __future__ import annotations

import ast

# every Tensor method that returns the tensor in another dtype
TENSOR_CASTS = frozenset({"to", "float", "double", "half", "bfloat16", "type", "type_as"})
# the nn.Module methods that cast a whole model in place (type_as is a tensor's only)
MODULE_CASTS = TENSOR_CASTS - {"type_as"}
# the casts that can lower a value to 16 bits (float() and double() only ever raise)
CAN_LOWER = TENSOR_CASTS - {"float", "double"}
# the casts whose name is their dtype: `x.half()` is `x.to(torch.float16)`
METHOD_DTYPE = {"half": "float16", "bfloat16": "bfloat16", "float": "float32", "double": "float64"}
# those that lower, and those that raise
LOWERING_METHODS = frozenset(m for m, d in METHOD_DTYPE.items() if d in ("float16", "bfloat16"))
RAISING_METHODS = frozenset(METHOD_DTYPE) - LOWERING_METHODS
# the methods that cast a float64 tensor to a lower dtype (`.float()` too)
LOWERING_FROM_FLOAT64 = LOWERING_METHODS | {"float"}
# the casts told their dtype by an argument: `.to(X)`, `.to(dtype=X)`, `.type(X)`
DTYPE_ARGUMENT = TENSOR_CASTS - frozenset(METHOD_DTYPE) - {"type_as"}
# a whole model cast that may lower its parameters: `model.half()`, `model.to(torch.bfloat16)`
MODULE_LOWERING = MODULE_CASTS & CAN_LOWER


def cast_call(node: object, among: frozenset[str] = TENSOR_CASTS) -> bool:
    """`node` (an ast node) is a method call `<expr>.<cast>(...)` with a name of `among`."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in among


# the calls that make a new tensor in another tensor's dtype when given none: `x.new_empty(n)`,
# `torch.zeros_like(x)`: a decision of their own (the new tensor's), inherited from `x`
INHERITING = frozenset(
    {"new_zeros", "new_ones", "new_empty", "new_full"}
    | {f"{n}_like" for n in ("zeros", "ones", "empty", "full", "rand", "randn")}
)
