"""The user's names a remedy is written in, and placeholders where a producer knows none."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar


def module_ref(path: object, model: str = "model") -> str:
    """`model.encoder.norm`, or `model.get_submodule("h.0.ln_1")` where attribute access is not Python."""
    if not isinstance(path, str) or path in ("", "<root>"):
        return model
    if path == "self" or path.startswith("self."):
        return path  # an expression from the forward that raised: valid there, not under `model`
    if all(part.isidentifier() for part in path.split(".")):
        return f"{model}.{path}"
    return f'{model}.get_submodule("{path}")'


class Listed(list):
    """Several names in one: `{paths}` writes them joined by commas, `{paths:code}` each in backticks,
    `{paths:semi}` joined by semicolons; `!r`/`!s` give the list itself."""

    def __format__(self, spec: str) -> str:
        if spec == "code":
            return ", ".join(f"`{x}`" for x in self)
        if spec == "semi":
            return "; ".join(str(x) for x in self)
        return ", ".join(format(x, spec) for x in self)


def present(value: object) -> bool:
    """Evidence that is there: not None, not an empty text or list (0 and False are values)."""
    return value is not None and not (isinstance(value, str | list | tuple) and len(value) == 0)


class Names(dict):
    """format_map mapping that fills a missing name with a readable placeholder."""

    _DEFAULTS: ClassVar[dict[str, str]] = {
        "module": "the module",
        "module_class": "nn.Module",
        "param": "the parameter",
        "input": "the input",
        "model": "model",
        "optimizer": "optimizer",
        "scaler": "scaler",
        "dtype": "torch.float16",
        "other_dtype": "torch.float32",
        "file": "your code",
        "line": "?",
        "tensor": "x",
        "array": "array",
        "op": "the op",
        "modules": '["the module"]',
        "device": "cuda",
        "made_op": "torch.zeros",
        "leaf": "the module",
        "model_class": "MyModel",
        "where": "A module",
        "scale": "scale",
        "input_absmax": "a large value",
        "factor": "small",
        "detail": "",
        "ranks": "?",
    }

    @classmethod
    def known(cls, names: Mapping[str, object], listed: bool = False) -> Names:
        """The names a producer gave, those it left None dropped (lists as `Listed` if `listed`)."""
        return cls(
            {
                k: Listed(v) if listed and isinstance(v, list | tuple) else v
                for k, v in names.items()
                if v is not None
            }
        )

    def __missing__(self, key: str) -> str:
        if key == "module_ref":  # the module as a Python expression the user can paste
            return module_ref(self.get("module"), self.get("model") or "model")
        if key == "at":  # "at file.py:12" when the producer knows the place, else a neutral phrase
            return f"at {self['file']}:{self['line']}" if "file" in self else "in your code"
        return self._DEFAULTS.get(key, f"the {key.replace('_', ' ')}")
