"""The knowledge: error families, their causes and their fixes.

Data only, no torch import. Every producer (explain, watch, check, audit, numerics,
env) names a family code; the catalog supplies the plain-words cause and the ranked
fixes, made concrete with the names a producer knows (`module`, `param`, ...).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import ClassVar

from ..report import Finding, Fix, Severity
from .families import FAMILIES
from .model import Family, FixTemplate, MessagePattern

__all__ = ["FAMILIES", "Family", "FixTemplate", "MessagePattern", "codes", "family", "finding", "fixes_for"]

_BY_CODE = {f.code: f for f in FAMILIES}


def codes() -> list[str]:
    return list(_BY_CODE)


def family(code: str) -> Family:
    try:
        return _BY_CODE[code]
    except KeyError:
        raise KeyError(f"unknown family code {code!r}") from None


def module_ref(path: object, model: str = "model") -> str:
    """`model.encoder.norm`, or `model.get_submodule("h.0.ln_1")` where attribute access is not Python."""
    if not isinstance(path, str) or path in ("", "<root>"):
        return model
    if path == "self" or path.startswith("self."):
        return path  # an expression from the forward that raised: valid there, not under `model`
    if all(part.isidentifier() for part in path.split(".")):
        return f"{model}.{path}"
    return f'{model}.get_submodule("{path}")'


class _Names(dict):
    """format_map mapping that fills a missing name with a readable placeholder."""

    _DEFAULTS: ClassVar[dict[str, str]] = {
        "module": "the module",
        "module_class": "nn.Module",
        "param": "the parameter",
        "input": "the input",
        "model": "model",
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

    def __missing__(self, key: str) -> str:
        if key == "module_ref":  # the module as a Python expression the user can paste
            return module_ref(self.get("module"), self.get("model") or "model")
        if key == "at":  # "at file.py:12" when the producer knows the place, else a neutral phrase
            return f"at {self['file']}:{self['line']}" if "file" in self else "in your code"
        return self._DEFAULTS.get(key, f"the {key.replace('_', ' ')}")


def _in_comment(line: str, old: str, new: str) -> str:
    code, sep, comment = line.partition("#")
    return code + sep + comment.replace(old, new)


def fixes_for(code: str, context: Iterable[str] = (), **names: object) -> list[Fix]:
    """Ranked fixes of a family for a context.

    A template with `when` tags applies only if one of them is in `context`; one with
    `unless` tags is dropped if any is present. Context-specific fixes come first,
    in catalog order, then the general ones.
    """
    ctx = set(context)
    fam = family(code)
    specific: list[Fix] = []
    general: list[Fix] = []
    mapping = _Names({k: v for k, v in names.items() if v is not None})
    for t in fam.fixes:
        if t.unless and ctx & t.unless:
            continue
        if t.when and not (ctx & t.when):
            continue
        title = t.title.format_map(mapping)
        snippet = t.snippet.format_map(mapping)
        if "module" not in mapping:  # no module known: say so, never quote a placeholder as a name
            title = title.replace("'the module'", "the module that raised")
        elif mapping["module"] == "<root>":  # the model itself: the user's name for it
            model = str(mapping.get("model") or "model")
            title = title.replace("'<root>'", f"`{model}`").replace("<root>", f"the whole model `{model}`")
            snippet = "\n".join(_in_comment(line, "<root>", model) for line in snippet.splitlines())
        fix = Fix(title=title, snippet=snippet, why=t.why)
        (specific if t.when else general).append(fix)
    return specific + general


def finding(
    code: str,
    context: Iterable[str] = (),
    names: Mapping[str, object] | None = None,
    **fields: object,
) -> Finding:
    """A Finding for `code` with the catalog's title, cause, severity and ranked fixes.

    `fields` override or add Finding attributes (location, operands, evidence, message...).
    """
    fam = family(code)
    names = dict(names or {})
    base: dict[str, object] = {
        "code": code,
        "title": fam.title,
        "severity": Severity(fam.severity),
        "cause": fam.cause.format_map(_Names({k: v for k, v in names.items() if v is not None})),
        "fixes": fixes_for(code, context, **names),
        "related": list(fam.related),
    }
    base.update(fields)
    return Finding(**base)  # type: ignore[arg-type]
