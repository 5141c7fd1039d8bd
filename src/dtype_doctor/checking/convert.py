"""Put the meta mirror in the dtype a real load gives it, loader by loader.

- transformers 5 `from_pretrained(dtype=d)` builds the model under `torch.set_default_dtype(d)`, then
  casts each checkpoint tensor to the dtype the freshly built tensor has (so a parameter created with an
  explicit `dtype=torch.float32` stays float32), except the `_get_dtype_plan(d)` keys
  (`_keep_in_fp32_modules` for float16, `_keep_in_fp32_modules_strict` for float16 and bfloat16), which
  become float32. Buffers not in the checkpoint keep the dtype they were built in (d, for floats).
- diffusers `from_pretrained(torch_dtype=d)` builds under the default dtype d too, then casts every
  floating checkpoint tensor to d, or to float32 when a `_keep_in_fp32_modules` name is one of the
  dotted parts of its key.
- anything else: `model.to(d)`.

The real loaders' code (transformers/modeling_utils.py, core_model_loading.py; diffusers
models/modeling_utils.py, model_loading_utils.py) is the reference; the fresh build happens on meta.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from ..dtypes import dtype_name
from ..repair.fix import convert
from ..repair.policy import KeepPattern, is_compute_float, kept_modules

__all__ = ["convert_like_loader", "loader_of"]


def loader_of(model: nn.Module) -> str:
    """ "transformers", "diffusers" or "torch": which loader the model's class loads through."""
    names = [c.__module__ for c in type(model).__mro__]
    if any(n.startswith("transformers.") for n in names) and hasattr(model, "config"):
        return "transformers"
    if any(n.startswith("diffusers.") for n in names) and hasattr(type(model), "from_config"):
        return "diffusers"
    return "torch"


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


class _NoRandomFill(TorchFunctionMode):
    """Initialisers of meta tensors skipped: they set no value, yet run torch's Python decomposition
    of uniform_/normal_ for each weight (half the rebuild of a Llama-7B). A mode, so other threads
    building models meanwhile are untouched."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func in _RANDOM_FILLS:
            target = args[0] if args else kwargs.get("tensor")  # init functions pass it by keyword
            if isinstance(target, torch.Tensor) and target.is_meta:
                return target
        return func(*args, **kwargs)


# torch.nn.init's in-place initialisers (each hands itself to the mode first) and the fills they use
_RANDOM_FILLS = {
    *(getattr(torch.nn.init, n) for n in dir(torch.nn.init) if n.endswith("_") and not n.startswith("_")),
    torch.Tensor.uniform_,
    torch.Tensor.normal_,
}


def _fresh(model: nn.Module, loader: str, dtype: torch.dtype) -> nn.Module:
    """The model as the loader builds it, on meta, before weights are loaded."""
    config = copy.deepcopy(model.config)
    with torch.device("meta"), _default_dtype(dtype), _NoRandomFill():
        if loader == "transformers":
            return type(model)(config)
        return type(model).from_config(config)


def _transformers_dtypes(model: nn.Module, fresh: nn.Module, dtype: torch.dtype) -> dict[str, torch.dtype]:
    from transformers.core_model_loading import build_glob_alternation

    plan = model._get_dtype_plan(dtype)  # read on the user's instance, as from_pretrained does
    search = build_glob_alternation(list(plan))[0].search if plan else None
    checkpoint = set(fresh.state_dict())
    out = {}
    for name, t in _named_tensors(fresh):
        keep = search is not None and name in checkpoint and is_compute_float(t) and search(name)
        out[name] = torch.float32 if keep else t.dtype
    return out


def _diffusers_dtypes(model: nn.Module, fresh: nn.Module, dtype: torch.dtype) -> dict[str, torch.dtype]:
    keep = list(getattr(type(model), "_keep_in_fp32_modules", None) or ())
    checkpoint = set(fresh.state_dict())
    out = {}
    for name, t in _named_tensors(fresh):
        if name not in checkpoint or not is_compute_float(t):
            out[name] = t.dtype
        else:
            out[name] = torch.float32 if any(k in name.split(".") for k in keep) else dtype
    return out


def _named_tensors(model: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    yield from model.named_parameters(remove_duplicate=False)
    yield from model.named_buffers(remove_duplicate=False)


def convert_like_loader(
    mirror: nn.Module, dtype: torch.dtype, keep_fp32: Iterable[KeepPattern] = ()
) -> tuple[list[str], str]:
    """Convert the mirror in place as its loader would; returns (modules kept in fp32, how it was loaded).

    `keep_fp32` modules (the user's own) become float32 on top of what the loader does."""
    keep_fp32 = tuple(keep_fp32)
    loader = loader_of(mirror)
    dtypes = None
    if loader != "torch":
        try:
            fresh = _fresh(mirror, loader, dtype)
            pick = _transformers_dtypes if loader == "transformers" else _diffusers_dtypes
            dtypes = pick(mirror, fresh, dtype)
        except Exception:  # a model the loader could not rebuild from its config: cast as .to() does
            dtypes = None
    arg = "dtype" if loader == "transformers" else "torch_dtype"
    how = f"{loader} from_pretrained({arg}={dtype_name(dtype)})"
    if dtypes is None:
        kept = [name for name, _ in convert(mirror, dtype, keep_fp32, loading=loader != "torch")]
        if loader == "torch":
            return kept, f"model.to({dtype_name(dtype)})"
        return kept, f"{how}, approximated: the model could not be rebuilt from its config"
    _apply(mirror, dtypes, dtype)
    kept = [name for name, _ in kept_modules(mirror, keep_fp32)] if dtype != torch.float32 else []
    for name in kept:
        convert(mirror.get_submodule(name), torch.float32)
    kept += _fp32_islands(mirror, dtypes, dtype, kept)
    return kept, how


def _apply(mirror: nn.Module, dtypes: dict[str, torch.dtype], dtype: torch.dtype) -> None:
    with torch.no_grad():
        for prefix, module in mirror.named_modules():
            dot = f"{prefix}." if prefix else ""
            for key, p in module._parameters.items():
                if p is not None and is_compute_float(p):
                    want = dtypes.get(dot + key, dtype)
                    if p.dtype != want:
                        p.data = p.data.to(want)
            for key, b in module._buffers.items():
                if b is not None and is_compute_float(b):
                    want = dtypes.get(dot + key, dtype)
                    if b.dtype != want:
                        module._buffers[key] = b.to(want)


def _fp32_islands(mirror: nn.Module, dtypes: dict[str, torch.dtype], dtype: torch.dtype, kept: list) -> list:
    """Modules whose parameters the loader left entirely in float32 (kept in fp32 by the loader)."""
    if dtype == torch.float32:
        return []
    out: list[str] = []
    fp32 = _all_float32(mirror)
    for name, module in mirror.named_modules():
        if not name or any(name == k or name.startswith(k + ".") for k in (*kept, *out)):
            continue
        if fp32[id(module)] and module is not mirror:
            out.append(name)
    return out


def _all_float32(root: nn.Module) -> dict[int, bool]:
    """id(module) -> whether `module.parameters()` has compute-float ones, all float32: one walk,
    children first, instead of a walk of each module's subtree."""
    summary: dict[int, tuple[bool, bool]] = {}  # (has a compute-float parameter, all of them float32)
    todo: list[tuple[nn.Module, bool]] = [(root, False)]
    while todo:
        module, ready = todo.pop()
        if id(module) in summary:
            continue
        children = [c for c in module._modules.values() if c is not None]
        if not ready:
            todo.append((module, True))
            todo.extend((c, False) for c in children if id(c) not in summary)
            continue
        floats = [p.dtype for p in module._parameters.values() if p is not None and is_compute_float(p)]
        has, fp32 = bool(floats), all(d == torch.float32 for d in floats)
        for child in children:
            child_has, child_fp32 = summary.get(id(child), (False, True))
            has, fp32 = has or child_has, fp32 and child_fp32
        summary[id(module)] = (has, fp32)
    return {key: has and fp32 for key, (has, fp32) in summary.items()}
