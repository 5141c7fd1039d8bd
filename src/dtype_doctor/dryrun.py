"""A small self-contained rule check for check's meta dry run, used while `dtype_doctor.watch` is absent.

It follows the watch contract for mode="fix" (a context manager filling a Report, casting the odd
operand so the run goes on) with a short rule table (research/probes-torch-2.13-cpu.md §1):
linear/matmul family, conv (bias checked first, as on CPU), norms (low-precision input with fp32
parameters is allowed), attention, indexed assignment, and silent promotion by cat/stack/+/where.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils.weak import WeakIdKeyDictionary

from . import catalog
from .dtypes import torch_name
from .policy import dtype_name
from .report import Location, Operand, Origin, Report

_LOW = (torch.float16, torch.bfloat16)

# func → (op name, code, positional operand roles ("" = not an operand), rule, reference role)
_RULES: dict[Any, tuple[str, str, tuple[str, ...], str, str | None]] = {
    F.linear: ("linear", "matmul-dtype-mismatch", ("input", "weight", "bias"), "same", "weight"),
    torch.mm: ("mm", "matmul-dtype-mismatch", ("input", "mat2"), "same", None),
    torch.matmul: ("matmul", "matmul-dtype-mismatch", ("input", "other"), "same", None),
    torch.Tensor.matmul: ("matmul", "matmul-dtype-mismatch", ("input", "other"), "same", None),
    torch.Tensor.__matmul__: ("matmul", "matmul-dtype-mismatch", ("input", "other"), "same", None),
    torch.Tensor.mm: ("mm", "matmul-dtype-mismatch", ("input", "mat2"), "same", None),
    torch.bmm: ("bmm", "matmul-dtype-mismatch", ("input", "mat2"), "same", None),
    torch.Tensor.bmm: ("bmm", "matmul-dtype-mismatch", ("input", "mat2"), "same", None),
    torch.addmm: ("addmm", "matmul-dtype-mismatch", ("bias", "mat1", "mat2"), "same", "mat2"),
    torch.baddbmm: ("baddbmm", "matmul-dtype-mismatch", ("input", "batch1", "batch2"), "same", "batch2"),
    F.layer_norm: ("layer_norm", "norm-dtype-mismatch", ("input", "", "weight", "bias"), "norm", "weight"),
    F.group_norm: ("group_norm", "norm-dtype-mismatch", ("input", "", "weight", "bias"), "norm", "weight"),
    F.batch_norm: (
        "batch_norm",
        "norm-dtype-mismatch",
        ("input", "running_mean", "running_var", "weight", "bias"),
        "norm",
        "weight",
    ),
    F.scaled_dot_product_attention: (
        "scaled_dot_product_attention",
        "attention-dtype-mismatch",
        ("query", "key", "value", "attn_mask"),
        "attention",
        "query",
    ),
    torch.Tensor.index_put_: (
        "index_put_",
        "index-put-dtype-mismatch",
        ("input", "", "values"),
        "same",
        "input",
    ),
    torch.index_put: ("index_put", "index-put-dtype-mismatch", ("input", "", "values"), "same", "input"),
    torch.Tensor.__setitem__: (
        "__setitem__",
        "index-put-dtype-mismatch",
        ("input", "", "values"),
        "setitem",
        "input",
    ),
}
for _conv in (F.conv1d, F.conv2d, F.conv3d, F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d):
    _RULES[_conv] = (
        _conv.__name__,
        "conv-weight-dtype-mismatch",
        ("input", "weight", "bias"),
        "conv",
        "weight",
    )
_KWARG_ROLES = {
    "input": "input",
    "weight": "weight",
    "bias": "bias",
    "attn_mask": "attn_mask",
    "other": "other",
}

_PROMOTING = {torch.cat, torch.concat, torch.stack, torch.where, torch.add, torch.sub, torch.mul, torch.div}
_PROMOTING |= {torch.Tensor.__add__, torch.Tensor.__radd__, torch.Tensor.__sub__, torch.Tensor.__rsub__}
_PROMOTING |= {torch.Tensor.__mul__, torch.Tensor.__rmul__, torch.Tensor.__truediv__, torch.Tensor.add}
_PROMOTING |= {torch.Tensor.mul, torch.Tensor.sub, torch.Tensor.div}
_CASTS = {torch.Tensor.to, torch.Tensor.float, torch.Tensor.half, torch.Tensor.bfloat16, torch.Tensor.type}
_SKIP_FILES = ("/torch/", "/dtype_doctor/")


class MetaRuleSession(TorchFunctionMode):
    """`with MetaRuleSession(model, report): model(x)`: records mismatches and casts to keep going."""

    def __init__(self, model: nn.Module, report: Report) -> None:
        super().__init__()
        self.report = report
        self.names = {id(m): n for n, m in model.named_modules()}
        self.stack: list[nn.Module] = []
        self.origins = WeakIdKeyDictionary()
        for prefix, module in model.named_modules():
            for name, t in (*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)):
                if t is not None:
                    kind = "parameter" if isinstance(t, nn.Parameter) else "buffer"
                    full = f"{prefix}.{name}" if prefix else name
                    self.origins[t] = Origin(kind=kind, name=full, module=prefix, dtype=dtype_name(t.dtype))
        self.root = model
        self._hooks: list[Any] = []

    # -- module stack and input names
    def __enter__(self) -> MetaRuleSession:
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

        self._hooks = [
            register_module_forward_pre_hook(self._push),
            register_module_forward_hook(self._pop, always_call=True),
        ]
        self._hooks.append(self.root.register_forward_pre_hook(self._name_inputs, with_kwargs=True))
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        for h in self._hooks:
            h.remove()
        super().__exit__(*exc)

    def _push(self, module: nn.Module, args: Any) -> None:
        self.stack.append(module)

    def _pop(self, module: nn.Module, args: Any, output: Any) -> None:
        if self.stack and self.stack[-1] is module:
            self.stack.pop()

    def _name_inputs(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        import inspect

        try:
            names = list(inspect.signature(module.forward).parameters)
        except (TypeError, ValueError):
            names = []
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor):
                self.origins[a] = Origin(kind="input", name=names[i] if i < len(names) else f"arg{i}")
        for k, v in kwargs.items():
            if isinstance(v, torch.Tensor):
                self.origins[v] = Origin(kind="input", name=k, dtype=dtype_name(v.dtype))

    # -- the rules
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        rule = _RULES.get(func)
        if rule is not None:
            args, kwargs = self._apply(rule, args, kwargs)
        out = func(*args, **kwargs)
        if func in _PROMOTING or func in _CASTS or rule is not None:
            self._trace(func, args, kwargs, out)
        return out

    def _apply(self, rule, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        op, code, roles, kind, ref = rule
        if kind == "setitem" and not any(isinstance(t, torch.Tensor) for t in _flat(args[1:2])):
            return args, kwargs  # slice assignment is a copy_: it casts into the destination
        slots = [(role, ("a", i), args[i]) for i, role in enumerate(roles) if role and i < len(args)] + [
            (_KWARG_ROLES[k], ("k", k), v) for k, v in kwargs.items() if k in _KWARG_ROLES and k in roles
        ]
        slots = [s for s in slots if isinstance(s[2], torch.Tensor) and s[2].is_floating_point()]
        if len(slots) < 2:
            return args, kwargs
        odd, need, code = _evaluate(kind, code, slots, ref)
        if not odd:
            return args, kwargs
        self._record(op, code, slots, odd, need)
        args, kwargs = list(args), dict(kwargs)
        for role, where, t in slots:
            if role in odd:
                cast = t.to(need)
                if where[0] == "a":
                    args[where[1]] = cast
                else:
                    kwargs[where[1]] = cast
        return tuple(args), kwargs

    def _record(self, op: str, code: str, slots: list, odd: set[str], need: torch.dtype) -> None:
        module = self.stack[-1] if self.stack else None
        path = self.names.get(id(module), "") if module is not None else None
        file, line = _caller()
        odd_slot = next(s for s in slots if s[0] in odd)
        origin = self.origins.get(odd_slot[2])
        finding = catalog.finding(
            code,
            names={
                "module": f"'{path}'" if path else "the module",
                "dtype": torch_name(dtype_name(need)),
                "other_dtype": torch_name(dtype_name(odd_slot[2].dtype)),
                "input": origin.name if origin and origin.name else odd_slot[0],
            },
            message=f"{op}: "
            + ", ".join(f"{role} {dtype_name(t.dtype)}" for role, _, t in slots)
            + f" → cast {', '.join(sorted(odd))} to {dtype_name(need)}",
            location=Location(
                module=path,
                module_type=type(module).__name__ if module is not None else None,
                op=op,
                file=file,
                line=line,
            ),
            operands=[
                Operand(role=role, dtype=dtype_name(t.dtype), shape=list(t.shape), origin=self.origins.get(t))
                for role, _, t in slots
            ],
        )
        self.report.add(finding)

    def _trace(self, func, args: tuple, kwargs: dict, out: Any) -> None:
        """Origins: an output inherits the origin of an operand with its dtype, else the op is its origin."""
        if not isinstance(out, torch.Tensor) or not out.is_floating_point():
            return
        tensors = [t for t in _flat((args, kwargs)) if t.is_floating_point()]
        op = getattr(func, "__name__", str(func))
        module = self.names.get(id(self.stack[-1])) if self.stack else None
        dtypes = {t.dtype for t in tensors if t.dim() > 0}
        kind = "cast" if func in _CASTS else "promotion" if len(dtypes) > 1 else "op"
        if kind == "promotion" and dtypes & set(_LOW):
            self._promotion(op, module, tensors, dtypes, out)
        same = next((t for t in tensors if t.dtype == out.dtype and t in self.origins), None)
        if same is not None:
            self.origins[out] = self.origins[same]
            return
        file, line = _caller()
        self.origins[out] = Origin(
            kind=kind, op=op, module=module, file=file, line=line, dtype=dtype_name(out.dtype)
        )

    def _promotion(self, op: str, module: str | None, tensors: list, dtypes: set, out: torch.Tensor) -> None:
        file, line = _caller(3)
        self.report.add(
            catalog.finding(
                "silent-promotion",
                names={
                    "module": f"'{module}'" if module else "the module",
                    "dtype": torch_name(dtype_name(out.dtype)),
                },
                message=f"{op}: "
                + " with ".join(sorted(dtype_name(d) for d in dtypes))
                + f" → {dtype_name(out.dtype)}",
                location=Location(module=module, op=op, file=file, line=line),
                operands=[
                    Operand(
                        role=f"operand{i}",
                        dtype=dtype_name(t.dtype),
                        shape=list(t.shape),
                        origin=self.origins.get(t),
                    )
                    for i, t in enumerate(tensors)
                ],
            )
        )


def _evaluate(kind: str, code: str, slots: list, ref: str | None) -> tuple[set[str], torch.dtype, str]:
    by_role = {role: t for role, _, t in slots}
    if kind == "conv":
        x, w, b = by_role.get("input"), by_role.get("weight"), by_role.get("bias")
        if x is not None and b is not None and b.dtype != x.dtype:
            return (
                {"input"} | ({"weight"} if w is not None and w.dtype != b.dtype else set()),
                b.dtype,
                "conv-bias-dtype-mismatch",
            )
        if x is not None and w is not None and w.dtype != x.dtype:
            return {"input"}, w.dtype, code
        return set(), x.dtype if x is not None else slots[0][2].dtype, code
    if kind == "norm":
        x = by_role.get("input")
        params = {r: t for r, t in by_role.items() if r in ("weight", "bias")}
        pdtypes = {t.dtype for t in params.values()}
        if len(pdtypes) > 1:
            w = params.get("weight")
            return {r for r, t in params.items() if t.dtype != w.dtype}, w.dtype, code
        if x is None or not pdtypes:
            return set(), slots[0][2].dtype, code
        p = pdtypes.pop()
        if p == x.dtype or (x.dtype in _LOW and p == torch.float32):
            return set(), p, code
        return {"input"}, p, code
    if kind == "attention":
        q = by_role["query"]
        odd = {r for r in ("key", "value") if r in by_role and by_role[r].dtype != q.dtype}
        mask = by_role.get("attn_mask")
        if mask is not None and mask.dtype not in (q.dtype, torch.float32):
            odd.add("attn_mask")
        return odd, q.dtype, code
    if kind == "setitem":
        values = by_role.get("values")
        if values is None or values.numel() <= 1:
            return set(), slots[0][2].dtype, code
    need = by_role[ref].dtype if ref in by_role else slots[0][2].dtype
    return {r for r, t in by_role.items() if t.dtype != need}, need, code


def _flat(value: Any):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _flat(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _flat(v)


def _caller(depth: int = 2) -> tuple[str | None, int | None]:
    frame = sys._getframe(depth)
    while frame is not None:
        name = frame.f_code.co_filename.replace("\\", "/")
        if not any(s in name for s in _SKIP_FILES):
            return name, frame.f_lineno
        frame = frame.f_back
    return None, None
