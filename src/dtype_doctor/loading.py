"""Loading what the user points the CLI at: `PATH_OR_MODULE:FACTORY`, or a Hugging Face config.

Shared by check, numerics, compare (input specs: inputs.py). Bad input raises DoctorError with
one clear line.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .errors import DoctorError


def load_object(target: str) -> Any:
    """`path/to/file.py:NAME` or `package.module:NAME` → the object (a factory or a model)."""
    if ":" not in target:
        raise DoctorError(f"expected PATH_OR_MODULE:FACTORY, got {target!r}")
    where, _, attr = target.rpartition(":")
    if not attr.isidentifier():
        raise DoctorError(f"bad factory name {attr!r} in {target!r}")
    if where.endswith(".py") or "/" in where or "\\" in where:
        module = _load_file(Path(where))
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as exc:
            raise DoctorError(f"cannot import {where!r}: {exc}") from None
        except (Exception, SystemExit) as exc:
            raise DoctorError(f"importing {where!r} raised {_describe(exc)}") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise DoctorError(f"{where!r} has no attribute {attr!r}") from None


def _load_file(path: Path) -> Any:
    if path.is_dir():
        raise DoctorError(f"{path} is a directory, not a Python file")
    if not path.is_file():
        raise DoctorError(f"no such file: {path}")
    name = f"_dtype_doctor_user_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise DoctorError(f"cannot load {path} as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(path.parent.resolve()))
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:
        raise DoctorError(f"running {path} raised {_describe(exc)}") from None
    finally:
        sys.path.pop(0)
    return module


def call_factory(factory: Callable[[], Any] | Any, what: str = "factory") -> Any:
    """Call a factory (or accept an already-built object), turning its failure into one line."""
    if not callable(factory) or _is_module(factory):
        return factory
    try:
        return factory()
    except (Exception, SystemExit) as exc:  # a factory's sys.exit() must not end the tool silently
        raise DoctorError(f"{what} raised {_describe(exc)}") from None


def _is_module(obj: Any) -> bool:
    torch = sys.modules.get("torch")
    return bool(torch) and isinstance(obj, torch.nn.Module)


def hf_config_factory(path: str) -> Callable[[], Any]:
    """A Hugging Face `config.json` (a file or a folder holding one) → a factory building the model
    from the config alone (no weights): transformers (`model_type`) or diffusers (`_class_name`)."""
    import json

    file = Path(path)
    if file.is_dir():
        file = file / "config.json"
    if not file.is_file():
        raise DoctorError(f"no such file: {file}")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise DoctorError(f"{file} is not a JSON config: {exc}") from None
    if not isinstance(data, dict):
        raise DoctorError(f"{file} is not a model config (expected a JSON object)")
    if "_class_name" in data:
        return _diffusers_factory(file, data)
    if "model_type" in data:
        return _transformers_factory(file, data)
    raise DoctorError(
        f"{file} is not a transformers or diffusers model config (it has no 'model_type' or '_class_name')"
    )


def _diffusers_factory(file: Path, data: dict) -> Callable[[], Any]:
    try:
        import diffusers
        import torch
    except ImportError as exc:
        raise DoctorError(f"{file} is a diffusers config, but diffusers cannot be imported: {exc}") from None
    name = data["_class_name"]
    cls = getattr(diffusers, str(name), None)
    if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module) and hasattr(cls, "from_config")):
        raise DoctorError(
            f"{file}: {name!r} is not a diffusers model class (a pipeline or scheduler config?)"
        )
    config = {k: v for k, v in data.items() if not k.startswith("_")}
    return lambda: cls.from_config(config)


def _transformers_factory(file: Path, data: dict) -> Callable[[], Any]:
    try:
        import transformers
    except ImportError as exc:
        raise DoctorError(
            f"{file} is a transformers config, but transformers cannot be imported: {exc}"
        ) from None
    fields = dict(data)
    model_type = fields.pop("model_type")
    try:
        config = transformers.AutoConfig.for_model(model_type, **fields)
    except Exception as exc:
        raise DoctorError(f"{file}: not a usable transformers config: {_describe(exc, short=True)}") from None
    archs = [a for a in (data.get("architectures") or []) if isinstance(getattr(transformers, a, None), type)]
    if archs:
        cls = getattr(transformers, archs[0])
        return lambda: cls(config)
    return lambda: transformers.AutoModel.from_config(config)


def _describe(exc: BaseException, short: bool = False) -> str:
    """One line about an exception from user code (`short`: without the exception's type)."""
    if isinstance(exc, SystemExit):
        return f"SystemExit({exc.code!r})"
    text = (str(exc).strip().splitlines() or [""])[0]
    if len(text) > 300:
        text = text[:300] + "..."
    return text if short else f"{type(exc).__name__}: {text}"
