"""The dtype map of a model: module path → its type and the dtypes of the tensors it owns.

Shape (report.meta["dtype_map"], read by render/html.py and merge.py):
    {"": {"type": "GPT2LMHeadModel", "dtypes": {}},
     "transformer.h.0.attn.c_attn": {"type": "Conv1D", "dtypes": {"float16": 2}}, ...}
`dtypes` counts the parameters and floating buffers registered directly on that module.
"""

from __future__ import annotations

from typing import Any


def module_dtype_map(model: Any) -> dict[str, dict[str, Any]]:
    """The map for a torch.nn.Module (walks named_modules once; no tensor data is read)."""
    from ..dtypes import canonical

    result: dict[str, dict[str, Any]] = {}
    for name, module in model.named_modules():
        counts: dict[str, int] = {}
        tensors = [*module._parameters.values(), *module._buffers.values()]
        for tensor in tensors:
            if tensor is None:
                continue
            dtype = canonical(str(tensor.dtype))
            if dtype is None or not (tensor.is_floating_point() or tensor.is_complex()):
                continue
            counts[dtype] = counts.get(dtype, 0) + 1
        result[name] = {"type": type(module).__name__, "dtypes": counts}
    return result
