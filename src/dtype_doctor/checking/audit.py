"""audit: the dtype map of a model, pipeline or training set-up, and what in it will fail.

Looks only at metadata (dtypes, shapes, types): works on meta-device models, moves no data.
"""

from __future__ import annotations

import contextlib
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .. import catalog
from ..catalog import module_ref
from ..catalog.family_codes import (
    AUTOCAST_HALF_CONFLICT,
    DTYPE_MAP,
    FP16_GRADIENT_UNSCALE,
    FP32_ISLAND,
    LOW_PRECISION_UNDER_AUTOCAST,
    OPTIMIZER_STATE_DTYPE,
    PIPELINE_COMPONENT_DTYPE_MISMATCH,
    WEIGHT_BIAS_DTYPE_MISMATCH,
)
from ..dtype_map import format_map
from ..dtypes import is_low_precision, torch_name
from ..processors import module_pattern
from ..repair.policy import (
    NORM_WORDS,
    dominant_dtype,
    dtype_name,
    hf_keep_fp32,
    is_compute_float,
    matches,
    own_float_dtypes,
)
from ..report import Finding, Location, Operand, Report, Severity
from ..sections import DtypeMap, ModuleDtypes
from ..tensors import module_tensors

__all__ = ["audit", "dtype_map"]

# Modules whose forward uses weight and bias in one op: mixed dtypes there always fail.
_FUSED_TYPES: tuple[type, ...] = (
    nn.Linear,
    nn.Bilinear,
    nn.modules.conv._ConvNd,
    nn.LayerNorm,
    nn.GroupNorm,
    nn.modules.batchnorm._NormBase,
)
_DENOISERS = ("transformer", "unet", "prior", "decoder", "transformer_2")


@dataclass
class Setup:
    """What audit looks at: named models (pipeline components), optimizers, grad scalers."""

    models: dict[str, nn.Module] = field(default_factory=dict)
    optimizers: list[torch.optim.Optimizer] = field(default_factory=list)
    scalers: list[Any] = field(default_factory=list)
    pipeline: bool = False


def audit(
    target: Any,
    *,
    optimizer: torch.optim.Optimizer | None = None,
    scaler: Any = None,
    autocast: torch.dtype | str | None = None,
) -> Report:
    """Audit a model, a diffusers/transformers pipeline, or a tuple/dict of (model, optimizer, scaler).

    The folded dtype map is the report's DtypeMap section (and, as text, a `dtype-map` info finding
    per model). Findings: modules whose parameters disagree
    (`weight-bias-dtype-mismatch`), fp32 islands in a low-precision model, deliberate or not
    (`fp32-island`), pipeline components in different dtypes, a GradScaler or optimizer that will
    fail on the parameters' dtype, and a low-precision model set to run under autocast (given as
    `autocast=`, or found in a forward wrapped by accelerate).
    """
    setup = collect(target)
    if optimizer is not None:
        setup.optimizers.append(optimizer)
    if scaler is not None:
        setup.scalers.append(scaler)
    report = Report(tool="audit")
    if not setup.models and not setup.optimizers:
        raise TypeError(
            f"audit expects an nn.Module, a pipeline or an optimizer, got {type(target).__name__}"
        )
    dmap = DtypeMap()
    for prefix, model in setup.models.items():
        section = dtype_map(model, prefix)
        dmap.modules += section.modules
        report.add(_map_finding(prefix, model, section))
        report.extend(mixed_parameter_findings(model, prefix))
        report.extend(fp32_island_findings(model, prefix))
        found = autocast_of(model) if autocast is None else _autocast_dtype(autocast)
        if found is not None:
            report.extend(autocast_findings(model, prefix, found))
    if setup.pipeline:
        report.extend(pipeline_findings(setup.models))
    report.extend(_training_findings(setup))
    if dmap.modules:
        report.sections.append(dmap)
    return report


def collect(target: Any) -> Setup:
    setup = Setup()
    _collect(target, "", setup)
    return setup


def _collect(obj: Any, name: str, setup: Setup) -> None:
    if isinstance(obj, nn.Module):
        setup.models[name] = obj
    elif isinstance(obj, torch.optim.Optimizer):
        setup.optimizers.append(obj)
    elif isinstance(obj, torch.amp.GradScaler):
        setup.scalers.append(obj)
    elif isinstance(getattr(obj, "components", None), dict):  # diffusers DiffusionPipeline
        setup.pipeline = True
        for key, value in obj.components.items():
            if isinstance(value, nn.Module):
                setup.models[key] = value
    elif isinstance(getattr(obj, "model", None), nn.Module):  # transformers Pipeline
        setup.models["model"] = obj.model
    elif isinstance(obj, dict):
        for key, value in obj.items():
            _collect(value, str(key), setup)
    elif isinstance(obj, (list, tuple)):
        for index, value in enumerate(obj):
            _collect(value, name or f"{index}", setup)


# ---------------------------------------------------------------- dtype map


def dtype_map(model: nn.Module, name: str = "") -> DtypeMap:
    """The folded map: one entry per subtree holding one dtype; siblings in a ModuleList with the
    same dtype layout are one entry (`layers.0-31`, repeat 32), and only the first of them is expanded.
    `dtypes` counts elements; `own` is set where a module's own parameters disagree."""
    modules: list[ModuleDtypes] = []
    _map_rows(model, name, 1, modules)
    return DtypeMap(modules)


def _counts(module: nn.Module) -> Counter[str]:
    counts: Counter[str] = Counter()
    for _, t in module_tensors(module):
        counts[dtype_name(t.dtype)] += t.numel()
    return counts


def _layout(module: nn.Module) -> tuple:
    return tuple(sorted((n, dtype_name(t.dtype)) for n, t in module_tensors(module)))


def _map_rows(module: nn.Module, path: str, repeat: int, rows: list[ModuleDtypes]) -> None:
    counts = _counts(module)
    own = own_float_dtypes(module)
    mixed_own = own if len(set(own.values())) > 1 else {}
    rows.append(ModuleDtypes(path, type(module).__name__, dict(counts), repeat, mixed_own))
    if len(counts) <= 1:
        return
    children = list(module.named_children())
    i = 0
    while i < len(children):
        name, child = children[i]
        j = i + 1
        if name.isdigit():
            layout = _layout(child)
            while j < len(children) and children[j][0].isdigit() and _layout(children[j][1]) == layout:
                j += 1
        label = name if j == i + 1 else f"{name}-{children[j - 1][0]}"
        _map_rows(child, f"{path}.{label}" if path else label, j - i, rows)
        i = j


def _map_finding(prefix: str, model: nn.Module, section: DtypeMap) -> Finding:
    """The info finding that shows the map as text; the map itself is the report's DtypeMap section."""
    return catalog.finding(
        DTYPE_MAP,
        message=format_map(section.modules),
        location=Location(module=prefix, module_type=type(model).__name__),
        data={"dominant": dominant_dtype(model)},
    )


# ---------------------------------------------------------------- per-module findings


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix and name else prefix or name


def mixed_parameter_findings(model: nn.Module, prefix: str = "") -> list[Finding]:
    """Modules whose own floating parameters are in more than one dtype (the CogVLM case)."""
    groups: dict[tuple, list[str]] = defaultdict(list)
    for name, module in model.named_modules():
        own = own_float_dtypes(module)
        if len(set(own.values())) > 1:
            key = (module_pattern(_join(prefix, name)), type(module), tuple(sorted(own.items())))
            groups[key].append(_join(prefix, name))
    findings = []
    for (pattern, cls, own), paths in groups.items():
        dtypes = Counter(d for _, d in own)
        main = dtypes.most_common(1)[0][0]
        if "weight" in dict(own):
            main = dict(own)["weight"]
        other = next(d for d in dtypes if d != main)
        fused = issubclass(cls, _FUSED_TYPES)
        shown = paths[0] if len(paths) == 1 else pattern
        findings.append(
            catalog.finding(
                WEIGHT_BIAS_DTYPE_MISMATCH,
                names={"module": f"'{shown}'", "dtype": torch_name(main), "other_dtype": torch_name(other)},
                severity=Severity.ERROR if fused else Severity.WARNING,
                message=f"{shown} ({cls.__name__}): "
                + ", ".join(f"{n} {d}" for n, d in own)
                + (f"  ({len(paths)} modules)" if len(paths) > 1 else ""),
                location=Location(module=shown, module_type=cls.__name__),
                operands=[Operand(role=_role(n), dtype=d, name=f"{paths[0]}.{n}") for n, d in own],
                count=len(paths),
                data={"modules": paths},
            )
        )
    return findings


def _role(param: str) -> str:
    return param if param in ("weight", "bias") else "parameter"


def fp32_island_findings(model: nn.Module, prefix: str = "") -> list[Finding]:
    """Top-most fp32 subtrees (and lone fp32 parameters) inside a model that is mostly fp16/bf16."""
    main = dominant_dtype(model)
    if main is None or not is_low_precision(main):
        return []
    deliberate_patterns = tuple(re.compile(p) for p in hf_keep_fp32(model, getattr(torch, main)))
    islands: list[tuple[str, nn.Module | None, str, bool]] = []  # path, module, type name, deliberate
    skip: list[str] = []
    for name, module in model.named_modules():
        if any(name.startswith(s + ".") for s in skip):
            continue
        counts = _param_dtypes(module)
        if counts == {"float32"} and name:
            skip.append(name)
            deliberate = any(matches(w, name, module) for w in NORM_WORDS) or any(
                matches(p, name, module) for p in deliberate_patterns
            )
            islands.append((name, module, type(module).__name__, deliberate))
        elif len(counts) > 1:
            own = own_float_dtypes(module)
            if set(own.values()) == {"float32"}:  # fp32 parameters held next to low-precision children
                for pname in own:
                    path = _join(name, pname)
                    deliberate = any(matches(p, path, module) for p in deliberate_patterns)
                    islands.append((path, None, "Parameter", deliberate))
    groups: dict[tuple, list[str]] = defaultdict(list)
    for path, _, type_name, deliberate in islands:
        groups[(module_pattern(_join(prefix, path)), type_name, deliberate)].append(path)
    findings = []
    for (pattern, type_name, deliberate), own_paths in groups.items():
        paths = [_join(prefix, p) for p in own_paths]
        shown = paths[0] if len(paths) == 1 else pattern
        # snippets act on the model the user holds: paths relative to it, a parameter's owner module
        owners = [p.rpartition(".")[0] if type_name == "Parameter" else p for p in own_paths]
        keep = owners[0] if len(owners) == 1 else module_pattern(owners[0])
        why = "deliberate (a norm or _keep_in_fp32_modules)" if deliberate else "accidental?"
        findings.append(
            catalog.finding(
                FP32_ISLAND,
                context=("deliberate",) if deliberate else (),
                names={
                    "module": shown,
                    "keep": keep,
                    "module_ref": module_ref(keep),
                    "dtype": torch_name(main),
                    "other_dtype": "torch.float32",
                },
                severity=Severity.INFO if deliberate else Severity.WARNING,
                message=f"{shown} ({type_name}) is float32 in a {main} model: {why}"
                + (f"  ({len(paths)} modules)" if len(paths) > 1 else ""),
                location=Location(module=shown, module_type=type_name),
                count=len(paths),
                data={"modules": paths, "deliberate": deliberate},
            )
        )
    return findings


def _param_dtypes(module: nn.Module) -> set[str]:
    return {dtype_name(p.dtype) for p in module.parameters() if is_compute_float(p)}


# ---------------------------------------------------------------- pipelines


def pipeline_findings(models: dict[str, nn.Module]) -> list[Finding]:
    dtypes = {name: dominant_dtype(m) for name, m in models.items()}
    dtypes = {k: v for k, v in dtypes.items() if v is not None}
    if len(set(dtypes.values())) <= 1:
        return []
    reference_name = next((n for n in _DENOISERS if n in dtypes), None)
    if reference_name is None:
        reference = Counter(dtypes.values()).most_common(1)[0][0]
    else:
        reference = dtypes[reference_name]
    findings = []
    for name, dt in dtypes.items():
        if dt == reference:
            continue
        is_vae = "vae" in name
        findings.append(
            catalog.finding(
                PIPELINE_COMPONENT_DTYPE_MISMATCH,
                context=("vae",) if is_vae else (),
                names={"module": name, "dtype": torch_name(reference), "other_dtype": torch_name(dt)},
                message=f"component '{name}' ({type(models[name]).__name__}) is {dt}; "
                f"{reference_name or 'the pipeline'} is {reference}  ("
                + ", ".join(f"{n}: {d}" for n, d in dtypes.items())
                + ")",
                location=Location(module=name, module_type=type(models[name]).__name__),
                operands=[
                    Operand(role="component", dtype=dt, name=name),
                    Operand(
                        role="denoiser" if reference_name else "pipeline",
                        dtype=reference,
                        name=reference_name,
                    ),
                ],
                data={"components": dtypes},
            )
        )
    return findings


# ---------------------------------------------------------------- autocast


def _autocast_dtype(value: torch.dtype | str | bool) -> str:
    if value is True:
        return "float16"
    from ..dtypes import to_torch_dtype

    return dtype_name(to_torch_dtype(value))


def autocast_of(model: nn.Module) -> str | None:
    """The dtype of a torch.autocast wrapped around model.forward (accelerate's prepare does this)."""
    seen: set[int] = set()
    stack = [getattr(model, "forward", None)]
    while stack:
        fn = stack.pop()
        if fn is None or id(fn) in seen or len(seen) > 32:
            continue
        seen.add(id(fn))
        if isinstance(fn, torch.autocast):
            return dtype_name(fn.fast_dtype) if getattr(fn, "_enabled", True) else None
        stack.extend([getattr(fn, "__func__", None), getattr(fn, "__wrapped__", None)])
        for cell in getattr(fn, "__closure__", None) or ():
            with contextlib.suppress(ValueError):
                stack.append(cell.cell_contents)
        stack.extend(v for v in getattr(fn, "__dict__", {}).values() if callable(v))
    return None


def autocast_findings(model: nn.Module, prefix: str, autocast_dtype: str) -> list[Finding]:
    main = dominant_dtype(model)
    if not is_low_precision(main):
        return []
    differs = main != autocast_dtype
    return [
        catalog.finding(  # one family per set-up: watch and explain name the other half dtype so too
            AUTOCAST_HALF_CONFLICT if differs else LOW_PRECISION_UNDER_AUTOCAST,
            names={
                "dtype": torch_name(main),
                "other_dtype": torch_name(autocast_dtype),
                "device": next((p.device.type for p in model.parameters()), "cuda"),
            },
            severity=Severity.ERROR if differs else Severity.WARNING,
            message=f"{prefix or 'the model'} is {main} and runs under autocast({autocast_dtype})"
            + (": the first op autocast does not cast will fail" if differs else ": redundant casts"),
            location=Location(module=prefix, module_type=type(model).__name__),
            operands=[Operand(role="parameters", dtype=main), Operand(role="autocast", dtype=autocast_dtype)],
        )
    ]


# ---------------------------------------------------------------- optimizer and GradScaler


def _training_findings(setup: Setup) -> list[Finding]:
    names = {id(p): _join(prefix, n) for prefix, m in setup.models.items() for n, p in m.named_parameters()}
    params = [p for opt in setup.optimizers for g in opt.param_groups for p in g["params"]]
    if not params:
        params = [p for m in setup.models.values() for p in m.parameters() if p.requires_grad]
    findings: list[Finding] = []
    scaling = [s for s in setup.scalers if s.is_enabled()]
    fp16 = [p for p in params if p.dtype == torch.float16]
    if scaling and fp16:
        shown = [names.get(id(p), "?") for p in fp16[:3]]
        findings.append(
            catalog.finding(
                FP16_GRADIENT_UNSCALE,
                names={"param": shown[0], "device": fp16[0].device.type},
                message=f"GradScaler is enabled and {len(fp16)} of {len(params)} trained parameters are "
                f"float16 ({', '.join(shown)}{', ...' if len(fp16) > 3 else ''}): "
                "scaler.unscale_/step raises 'Attempting to unscale FP16 gradients.'",
                operands=[Operand(role="parameter", dtype="float16", name=shown[0])],
            )
        )
    for opt in setup.optimizers:
        findings.extend(_optimizer_findings(opt, names))
    return findings


def _optimizer_findings(opt: torch.optim.Optimizer, names: dict[int, str]) -> list[Finding]:
    findings = []
    low_state = sorted(
        {
            (key, dtype_name(v.dtype))
            for state in opt.state.values()
            for key, v in state.items()
            if torch.is_tensor(v) and is_low_precision(dtype_name(v.dtype)) and v.dim() > 0
        }
    )
    tiny_eps = [
        g for g in opt.param_groups if isinstance(g.get("eps"), float) and 0 < g["eps"] < 6e-8
    ]  # below fp16's smallest subnormal: it rounds to 0 in fp16 state
    fp16_params = [p for g in tiny_eps for p in g["params"] if p.dtype == torch.float16]
    if low_state or fp16_params:
        what = (
            ", ".join(f"{k} {d}" for k, d in low_state)
            if low_state
            else f"{len(fp16_params)} float16 parameters (its state will be float16)"
        )
        findings.append(
            catalog.finding(
                OPTIMIZER_STATE_DTYPE,
                severity=Severity.WARNING,
                message=f"{type(opt).__name__} keeps low-precision state: {what}; "
                f"eps={opt.param_groups[0].get('eps')} underflows to 0 in float16 and updates lose precision",
                operands=[Operand(role=k, dtype=d) for k, d in low_state[:4]]
                or [Operand(role="parameter", dtype="float16", name=names.get(id(fp16_params[0])))],
            )
        )
    return findings
