"""Every spelling of a dtype → one canonical name ("float32", "float16", "bfloat16", ...); the one
place that names, parses and validates a dtype (`dtype_name`, `parse_dtype`, `to_torch_dtype`).

No torch import at module level: `explain` uses this on text, `watch` on str(torch.dtype).
"""

from __future__ import annotations

import re
from typing import Any

from .errors import DoctorError

CANONICAL = (
    "float64", "float32", "float16", "bfloat16",
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
    "complex32", "complex64", "complex128",
    "int64", "int32", "int16", "int8", "uint64", "uint32", "uint16", "uint8", "bool",
)  # fmt: skip
# the floating dtypes a repair may choose between (float8 and complex never)
FLOATS = frozenset({"float16", "bfloat16", "float32", "float64"})

# Lower-cased spelling → canonical. Covers torch reprs, ATen/c10 scalar type names,
# legacy tensor type names (torch.cuda.HalfTensor), CUDA/CPU type names (CUDABFloat16Type),
# OneFlow (kFloat16) and numpy-ish short names.
_ALIASES = {
    "float": "float32", "float32": "float32", "fp32": "float32", "single": "float32",
    "double": "float64", "float64": "float64", "fp64": "float64",
    "half": "float16", "float16": "float16", "fp16": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "long": "int64", "int64": "int64",
    "int": "int32", "int32": "int32",
    "short": "int16", "int16": "int16",
    "char": "int8", "int8": "int8",
    "byte": "uint8", "uint8": "uint8",
    "bool": "bool",
    "long int": "int64", "long long": "int64", "int64_t": "int64", "int32_t": "int32",
    "unsigned char": "uint8", "signed char": "int8", "short int": "int16",
    "complexfloat": "complex64", "complex64": "complex64", "cfloat": "complex64",
    "complexdouble": "complex128", "complex128": "complex128", "cdouble": "complex128",
    "float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2",
    "float8_e4m3fnuz": "float8_e4m3fnuz", "float8_e5m2fnuz": "float8_e5m2fnuz",
    "float8_e8m0fnu": "float8_e8m0fnu",
    "complexhalf": "complex32", "complex32": "complex32", "chalf": "complex32",
    "uint16": "uint16", "uint32": "uint32", "uint64": "uint64",
    "f16": "float16", "f32": "float32", "f64": "float64",
    # CUDA C and Triton spellings (nvrtc / fuser / triton messages)
    "__half": "float16", "__nv_bfloat16": "bfloat16", "nv_bfloat16": "bfloat16",
    "fp8e4nv": "float8_e4m3fn", "fp8e5": "float8_e5m2",
    # cuBLAS data type names
    "cuda_r_16f": "float16", "cuda_r_16bf": "bfloat16", "cuda_r_32f": "float32", "cuda_r_64f": "float64",
}  # fmt: skip

_PREFIX = re.compile(
    r"^(?:(?:struct|class)\s+)?(?:c10::|at::|torch\.(?:cuda\.|xpu\.|mps\.)?|oneflow\.|flow\.|np\.|numpy\.)?"
)
_TYPE_NAME = re.compile(r"^(?:cuda|cpu|xpu|mps|sparse)?(?P<base>[a-z0-9_]+?)(?:tensor|type|storage)?$")


def canonical(spelling: str | object | None) -> str | None:
    """Return the canonical dtype name for any spelling, or None if it is not a dtype.

    >>> canonical("struct c10::Half"), canonical("torch.cuda.FloatTensor"), canonical("kFloat16")
    ('float16', 'float32', 'float16')
    """
    if spelling is None:
        return None
    text = str(spelling).strip().strip("'\"`()[]{},.:;")
    if not text:
        return None
    text = _PREFIX.sub("", text)
    # OneFlow / c10 enum style: kFloat16, kHalf, kBFloat16
    if len(text) > 1 and text[0] == "k" and text[1].isupper():
        text = text[1:]
    low = text.lower()
    if low in _ALIASES:
        return _ALIASES[low]
    m = _TYPE_NAME.match(low)
    if m and m.group("base") in _ALIASES:
        return _ALIASES[m.group("base")]
    return None


def is_low_precision(name: str | None) -> bool:
    return name in ("float16", "bfloat16") or bool(name and name.startswith("float8"))


def is_floating(name: str | None) -> bool:
    return bool(name) and name.startswith(("float", "bfloat"))


def torch_name(name: str | None) -> str:
    """'float16' → 'torch.float16' (for fix snippets)."""
    return f"torch.{name}" if name else "torch.float16"


def dtype_name(dtype: Any) -> str:
    """torch.float16 → 'float16' (the name every report uses for a torch.dtype)."""
    return str(dtype).removeprefix("torch.")


def parse_dtype(text: str) -> str:
    """A dtype the user typed ("fp16", "half", "torch.bfloat16") → its canonical name; DoctorError
    (one line, exit 2) when it names no dtype."""
    name = canonical(text)
    if name is None:
        raise DoctorError(f"unknown dtype {text!r}: expected e.g. float32, float16, bfloat16, int64")
    return name


def to_torch_dtype(value: Any) -> Any:
    """torch.float16, "fp16", "half", "torch.bfloat16"... → torch.dtype; DoctorError otherwise."""
    import torch

    if isinstance(value, torch.dtype):
        return value
    return getattr(torch, parse_dtype(value))
