"""Input specs: one type (`TensorSpec`), one parser, and the tensors they stand for, real or meta.

A spec is written `[name=]SHAPE[:DTYPE]` on the command line (`2x4x64x64:float32`,
`input_ids=1x16:int64`), or `("2x4x64x64", "float32")` / a `TensorSpec` in Python. check, compare,
numerics and the CLI all read specs here. Bad input raises DoctorError with one clear line.
torch is imported only by the functions that make tensors.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .dtypes import canonical, parse_dtype
from .errors import DoctorError

__all__ = [
    "TensorSpec",
    "as_spec",
    "batch_size",
    "is_spec_tuple",
    "meta_inputs",
    "parse_dtype",
    "parse_input",
    "parse_shape",
    "real_inputs",
    "spec_from_tuple",
    "split_inputs",
]

_SHAPE = re.compile(r"^\d+(?:[x×,]\d+)*$")
# What a spec looks like, malformed ones included ("2xx4" is a bad spec, "a cat" is no spec).
_SPEC_LIKE = re.compile(r"^(?:\w+=)?[x×,]*\d[\dx×,]*(?::\w+)?$")


@dataclass(frozen=True)
class TensorSpec:
    """A tensor described by shape and dtype, e.g. `2x4x64x64:float32`."""

    shape: tuple[int, ...]
    dtype: str  # canonical name
    name: str | None = None
    kind: str = "randn"  # randn | randint (integer dtypes) | zeros

    def make(self, device: Any = "cpu") -> Any:
        """A real tensor: normal floats, ones for bool, integers in [0, 100)."""
        import torch

        dtype = getattr(torch, self.dtype)
        try:
            if dtype.is_floating_point or dtype.is_complex:
                return torch.randn(self.shape, dtype=dtype, device=device)
            if dtype == torch.bool:
                return torch.ones(self.shape, dtype=dtype, device=device)
            return torch.randint(0, 100, self.shape, dtype=dtype, device=device)
        except (RuntimeError, MemoryError) as exc:  # torch's allocator error is 30 lines of C++ frames
            shape = "x".join(map(str, self.shape))
            raise DoctorError(
                f"cannot make input {shape}:{self.dtype} on {device}: {_first_line(exc)}"
            ) from None


def parse_shape(text: str) -> tuple[int, ...]:
    text = text.strip()
    if not _SHAPE.match(text):
        raise DoctorError(f"cannot parse shape {text!r}: expected e.g. 2x4x64x64")
    shape = tuple(int(n) for n in re.split(r"[x×,]", text))
    if any(n >= 2**63 for n in shape):
        raise DoctorError(
            f"shape {text!r} has a size beyond 2**63 - 1, the largest a tensor dimension can be"
        )
    if math.prod(shape) >= 2**63:
        raise DoctorError(f"shape {text!r} has more than 2**63 - 1 elements, more than a tensor can hold")
    return shape


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def parse_input(text: str) -> TensorSpec:
    """`[name=]SHAPE[:DTYPE]` → TensorSpec. DTYPE defaults to float32."""
    name, _, rest = text.rpartition("=") if "=" in text else (None, "", text)
    if name is not None and not name.isidentifier():
        raise DoctorError(f"bad input name {name!r} in {text!r}")
    shape_text, _, dtype_text = rest.partition(":")
    return TensorSpec(parse_shape(shape_text), parse_dtype(dtype_text or "float32"), name or None)


def spec_from_tuple(value: tuple) -> TensorSpec:
    """The Python form `("2x4x64x64", "float32")`."""
    if len(value) != 2 or not all(isinstance(v, str) for v in value):
        raise DoctorError(f'bad input spec {value!r}: expected ("2x4x64x64", "float32")')
    return TensorSpec(parse_shape(value[0]), parse_dtype(value[1]))


def split_inputs(specs: list[str]) -> tuple[list[TensorSpec], dict[str, TensorSpec]]:
    """CLI `--input` values → positional and keyword specs."""
    args: list[TensorSpec] = []
    kwargs: dict[str, TensorSpec] = {}
    for text in specs:
        spec = parse_input(text)
        if spec.name:
            if spec.name in kwargs:
                raise DoctorError(f"--input {spec.name}= given twice: give each input once")
            kwargs[spec.name] = spec
        elif kwargs:
            raise DoctorError(f"positional input {text!r} after named inputs")
        else:
            args.append(spec)
    return args, kwargs


def is_spec_tuple(value: Any) -> bool:
    """("2x4x64x64", "float32") is a spec; ("a cat", "a dog") is a real input. A pair naming a
    dtype with a shape-like first string ("2xx4", "float32") is a spec too: it fails to parse."""
    if not (isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, str) for v in value)):
        return False
    if _SPEC_LIKE.match(value[0]) is not None and "=" not in value[0]:
        return True
    return canonical(value[1]) is not None and any(c.isdigit() for c in value[0])


def as_spec(value: Any) -> TensorSpec | None:
    """The spec a value stands for (a TensorSpec, spec text, a spec pair), else None.
    Text or a pair that looks like a spec but is malformed raises DoctorError."""
    if isinstance(value, TensorSpec):
        return value
    if isinstance(value, str) and _SPEC_LIKE.match(value.strip()):
        return parse_input(value.strip())
    if is_spec_tuple(value):
        return spec_from_tuple(value)
    return None


def real_inputs(inputs: Any, device: Any, seed: int) -> tuple[tuple, dict]:
    """Anything the user can pass as inputs → (args, kwargs) of real tensors on `device`.
    Accepts a mapping (keyword inputs), an (args, kwargs) pair, a list/tuple of positional
    inputs, or one input; the global RNG state is left as it was."""
    import torch

    gen_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        if isinstance(inputs, Mapping):
            return (), {k: _real(v, device) for k, v in inputs.items()}
        if (
            isinstance(inputs, tuple)
            and len(inputs) == 2
            and isinstance(inputs[0], (tuple, list))
            and isinstance(inputs[1], Mapping)
        ):
            return tuple(_real(v, device) for v in inputs[0]), {
                k: _real(v, device) for k, v in inputs[1].items()
            }
        if isinstance(inputs, (list, tuple)) and not is_spec_tuple(inputs):
            return tuple(_real(v, device) for v in inputs), {}
        return (_real(inputs, device),), {}
    finally:
        torch.random.set_rng_state(gen_state)


def _real(value: Any, device: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value.to(device)
    spec = as_spec(value)
    if spec is not None:
        return spec.make(device)
    return value  # a Python scalar, None, a config object: passed as given


def meta_inputs(value: Any, name: str = "") -> Any:
    """Inputs for a dry run: floating tensors and specs become meta tensors; integer and bool
    tensors (ids, masks, positions) stay real on CPU, as the model may read their values."""
    import torch

    spec = as_spec(value)
    if spec is not None:
        dtype = getattr(torch, spec.dtype)
        if dtype.is_floating_point or dtype.is_complex:
            return torch.empty(spec.shape, dtype=dtype, device="meta")
        if "mask" in (spec.name or name):  # a made-up mask keeps every position
            return torch.ones(spec.shape, dtype=dtype)
        return spec.make()
    if isinstance(value, torch.Tensor):
        if value.is_meta:
            return value
        if value.is_floating_point() or value.is_complex():
            return torch.empty_like(value, device="meta")
        return value.detach().to("cpu")
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple
        return type(value)(*(meta_inputs(v) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(meta_inputs(v) for v in value)
    if isinstance(value, Mapping):  # dicts, and BatchEncoding-like mappings
        return {k: meta_inputs(v, str(k)) for k, v in value.items()}
    return value


def batch_size(args: tuple, kwargs: dict) -> int:
    """The leading dimension of the first tensor input with one (1 if none)."""
    import torch

    for t in [*args, *kwargs.values()]:
        if isinstance(t, torch.Tensor) and t.dim() > 0:
            return int(t.shape[0])
    return 1
