"""Audit the precision set-up of FSDP (MixedPrecision / MixedPrecisionPolicy) and DeepSpeed configs
against the dtypes the model actually holds. Reads the policy object or the config dict/JSON;
neither FSDP wrapping nor DeepSpeed is needed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import catalog
from ..catalog.family_codes import DEEPSPEED_CONFIG_CONFLICT, FSDP_POLICY_MISMATCH
from ..dtypes import canonical, is_floating, is_low_precision, torch_name
from ..errors import DoctorError
from ..report import Evidence, Finding, Location, Report, Severity

_FSDP = FSDP_POLICY_MISMATCH
_DS = DEEPSPEED_CONFIG_CONFLICT


def _model_dtypes(model: Any) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """({dtype: parameter names}, {dtype: floating buffer names})."""
    params: dict[str, list[str]] = {}
    buffers: dict[str, list[str]] = {}
    if model is None:
        return params, buffers
    for name, p in model.named_parameters():
        params.setdefault(canonical(str(p.dtype)) or str(p.dtype), []).append(name)
    for name, b in model.named_buffers():
        dtype = canonical(str(b.dtype))
        if is_floating(dtype):
            buffers.setdefault(dtype, []).append(name)
    return params, buffers


def _majority(by_dtype: Mapping[str, list[str]]) -> str | None:
    floating = {d: n for d, n in by_dtype.items() if is_floating(d)}
    return max(floating, key=lambda d: len(floating[d])) if floating else None


def _names(names: list[str], limit: int = 4) -> str:
    shown = ", ".join(f"'{n}'" for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _module_of(param_name: str) -> str:
    return param_name.rpartition(".")[0]


def _policy_dtype(policy: Any, name: str) -> str | None:
    value = policy.get(name) if isinstance(policy, Mapping) else getattr(policy, name, None)
    return canonical(str(value)) if value is not None else None


def _fsdp_finding(detail: str, dtype: str | None, severity: Severity | None = None, **fields: Any) -> Finding:
    extra: dict[str, Any] = {"severity": severity} if severity else {}
    return catalog.finding(
        _FSDP,
        names={"detail": detail, "dtype": torch_name(dtype) if dtype else None},
        message=detail,
        **extra,
        **fields,
    )


def audit_fsdp_policy(model: Any, mixed_precision: Any = None) -> Report:
    """Findings where an FSDP MixedPrecision (FSDP1) or MixedPrecisionPolicy (FSDP2) policy — the
    object or a dict with param_dtype/reduce_dtype/buffer_dtype — disagrees with the model.
    Without a policy, an FSDP1-wrapped model's own `mixed_precision` is read."""
    report = Report(tool="audit", meta={"audited": "fsdp-mixed-precision"})
    if mixed_precision is None:
        mixed_precision = getattr(model, "mixed_precision", None)
    if mixed_precision is None:
        report.meta["note"] = "no MixedPrecision policy given or found on the model: nothing to compare"
        return report
    params, buffers = _model_dtypes(model)
    param_dtype = _policy_dtype(mixed_precision, "param_dtype")
    reduce_dtype = _policy_dtype(mixed_precision, "reduce_dtype") or param_dtype
    buffer_dtype = _policy_dtype(mixed_precision, "buffer_dtype")
    policy_text = (
        f"policy: param_dtype={param_dtype}, reduce_dtype={_policy_dtype(mixed_precision, 'reduce_dtype')}, "
        f"buffer_dtype={buffer_dtype}"
    )
    evidence = [Evidence(text=policy_text, source="FSDP MixedPrecision")]
    floating = {d: n for d, n in params.items() if is_floating(d)}
    main = _majority(params)

    if len(floating) > 1:
        minority = sorted((d for d in floating if d != main), key=lambda d: len(floating[d]))
        odd = [n for d in minority for n in floating[d]]
        detail = (
            f"The model's parameters are not of one dtype: {len(floating[main])} {main}, "
            + ", ".join(f"{len(floating[d])} {d} ({_names(floating[d])})" for d in minority)
            + ". FSDP flattens the parameters of each wrapped unit into one tensor and refuses "
            "mixed dtypes ('Must flatten tensors with uniform dtype')."
        )
        report.add(
            _fsdp_finding(
                detail,
                main,
                Severity.ERROR,
                location=Location(module=_module_of(odd[0])),
                evidence=evidence,
                data={"parameters": {d: n for d, n in floating.items()}},
            )
        )
    if main and is_low_precision(main) and param_dtype:
        same = param_dtype == main
        detail = f"The model is already {main} and param_dtype is {param_dtype}: " + (
            "there is no float32 master copy, so the optimizer updates low-precision weights "
            "and small updates are lost."
            if same
            else f"FSDP casts the {main} master weights to {param_dtype} for every forward, "
            f"losing {main}'s extra {'mantissa' if main == 'float16' else 'range'} on top of having "
            "no float32 master copy."
        )
        report.add(_fsdp_finding(detail, param_dtype, evidence=evidence, location=Location(module="")))
    if reduce_dtype == "float16" and param_dtype != "float16":
        detail = (
            f"reduce_dtype is float16 while compute runs in {param_dtype or main}: gradients are "
            "summed across ranks in float16, which overflows (inf) long before the compute dtype does."
        )
        report.add(_fsdp_finding(detail, param_dtype or "float32", evidence=evidence))
    elif reduce_dtype == "float16" and param_dtype == "float16":
        detail = (
            "param_dtype is float16 and gradients are reduced in float16 (reduce_dtype unset or "
            "float16): use reduce_dtype=torch.float32 and a ShardedGradScaler."
        )
        report.add(_fsdp_finding(detail, "float16", evidence=evidence))
    if param_dtype and buffer_dtype is None:
        stray = {d: n for d, n in buffers.items() if d != param_dtype}
        if stray:
            names = [n for ns in stray.values() for n in ns]
            detail = (
                f"param_dtype is {param_dtype} but buffer_dtype is unset: floating buffers keep "
                f"{', '.join(sorted(stray))} ({_names(names)}) and meet {param_dtype} activations in forward."
            )
            report.add(
                _fsdp_finding(
                    detail, param_dtype, location=Location(module=_module_of(names[0])), evidence=evidence
                )
            )
    return report


# ---------------------------------------------------------------- DeepSpeed


def load_deepspeed_config(config: Mapping[str, Any] | str | os.PathLike[str]) -> tuple[dict[str, Any], str]:
    """(config dict, where it came from) from a dict, a JSON file path or a JSON string."""
    if isinstance(config, Mapping):
        return dict(config), "deepspeed config"
    text = str(config)
    if text.lstrip().startswith("{"):
        source, raw = "deepspeed config", text
    else:
        source = text
        try:
            raw = Path(text).read_text(encoding="utf-8")
        except OSError as exc:
            raise DoctorError(f"cannot read DeepSpeed config {text}: {exc.strerror or exc}") from None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise DoctorError(f"{source} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise DoctorError(f"{source} is not a DeepSpeed config (a JSON object)")
    return data, source


def _enabled(section: Any) -> bool | str:
    """True/False, or "auto" (the HF Trainer fills it from --fp16/--bf16)."""
    if not isinstance(section, Mapping):
        return False
    value = section.get("enabled", False)
    if isinstance(value, str):
        low = value.strip().lower()
        return "auto" if low == "auto" else low in ("true", "1", "yes")
    return bool(value)


def audit_deepspeed_config(model: Any, config: Mapping[str, Any] | str | os.PathLike[str]) -> Report:
    """Findings where a DeepSpeed config's fp16 / bf16 / amp / torch_autocast sections contradict
    each other or the dtypes of `model` (model may be None: config-only checks)."""
    cfg, source = load_deepspeed_config(config)
    report = Report(tool="audit", meta={"audited": "deepspeed-config", "config": source})
    fp16 = _enabled(cfg.get("fp16"))
    bf16 = _enabled(cfg.get("bf16", cfg.get("bfloat16")))
    amp = _enabled(cfg.get("amp"))
    autocast = cfg.get("torch_autocast") if _enabled(cfg.get("torch_autocast")) else None
    params, _ = _model_dtypes(model)
    main = _majority(params)

    def add(detail: str, section: str, severity: Severity | None = None, dtype: str | None = None) -> None:
        extra: dict[str, Any] = {"severity": severity} if severity else {}
        text = json.dumps({section: cfg.get(section)}) if section in cfg else section
        report.add(
            catalog.finding(
                _DS,
                names={"detail": detail, "dtype": torch_name(dtype) if dtype else None},
                message=detail,
                evidence=[Evidence(text=text, source=source)],
                **extra,
            )
        )

    if fp16 is True and bf16 is True:
        add(
            "Both fp16 and bf16 are enabled: DeepSpeed refuses this ('bfloat16 and fp16 modes cannot "
            "be simultaneously enabled'); one engine can run in one precision only.",
            "bf16",
            Severity.ERROR,
        )
    if amp is True and (fp16 is True or bf16 is True):
        add(
            "amp (NVIDIA apex) is enabled together with "
            + ("fp16" if fp16 is True else "bf16")
            + ": two mixed-precision managers would cast the same model; DeepSpeed refuses the pair.",
            "amp",
            Severity.ERROR,
        )
    elif amp is True:
        add(
            "amp is enabled: DeepSpeed hands the model to NVIDIA apex, whose own mixed-precision kernels "
            "must be installed and agree with the model's dtypes (the xDiT 'expected scalar type Float "
            'but found Half\' case); prefer "fp16" or "bf16" with native torch.',
            "amp",
        )
    engine_dtype = "float16" if fp16 is True else "bfloat16" if bf16 is True else None
    if autocast is not None:
        ac_dtype = canonical(str(autocast.get("dtype", "bfloat16"))) or "bfloat16"
        if engine_dtype and ac_dtype != engine_dtype:
            add(
                f"torch_autocast runs ops in {ac_dtype} while the engine casts the model to {engine_dtype}: "
                "an autocast of one low precision over weights of the other fails in real models.",
                "torch_autocast",
                Severity.ERROR,
                dtype=engine_dtype,
            )
        elif main and is_low_precision(main) and ac_dtype != main:
            add(
                f"torch_autocast runs ops in {ac_dtype} over a model already in {main}.",
                "torch_autocast",
                dtype=main,
            )
    if "auto" in (fp16, bf16):
        report.meta["auto_sections"] = [s for s, v in (("fp16", fp16), ("bf16", bf16)) if v == "auto"]
        return report  # the Trainer decides; the model-vs-config checks would guess
    if main and engine_dtype and main != engine_dtype and is_low_precision(main):
        add(
            f"The model is {main} but the config enables {'fp16' if fp16 is True else 'bf16'}: "
            f"deepspeed.initialize casts the module to {engine_dtype}, so an input cast with the dtype "
            f"read before initialize ({main}) fails against {engine_dtype} weights.",
            "fp16" if fp16 is True else "bf16",
            dtype=engine_dtype,
        )
    if main and is_low_precision(main) and engine_dtype is None and amp is not True:
        add(
            f"The model is {main} but the config enables neither fp16 nor bf16: DeepSpeed keeps no "
            f"float32 master weights and does no loss scaling for it.",
            "fp16",
            dtype=main,
        )
    comm = canonical(str(cfg.get("communication_data_type"))) if cfg.get("communication_data_type") else None
    if comm == "float16" and engine_dtype != "float16":
        add(
            f"communication_data_type is fp16 while training in {engine_dtype or 'float32'}: gradient "
            "all-reduce in float16 overflows first.",
            "communication_data_type",
        )
    return report
