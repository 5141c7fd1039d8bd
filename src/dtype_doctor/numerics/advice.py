"""Producers and range aggregates → Findings with recommendations (catalog codes, evidence)."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any

from torch import nn

from .. import catalog, remedies
from ..catalog.family_codes import FP16_HEADROOM, FP16_OVERFLOW, FP16_UNDERFLOW, NONFINITE_VALUES
from ..catalog.shared_remedies import KEEP_OVERFLOWED
from ..report import Evidence, Finding, Location, Operand, Report, Severity
from . import autocast_entry
from .analysis import Call, Grad, Producer, Sighting, TensorInfo
from .analysis import Operand as AnalysedOperand
from .stats import ABSMAX, BF16_MAX, FP16_MAX, MIN_NONZERO, N_TINY, N_ZERO, fmt, is_light

HEADROOM_FACTOR = 2.0  # float16 outputs within this factor of 65504 are reported
UNDERFLOW_SHARE = 0.05  # share of a gradient's non-zero values below float16's smallest normal
# a forward output is reported only when most of it is subnormal: a few tiny activations (GELU
# tails, a small residual branch) change no result, a mostly-subnormal matmul/norm input does
UNDERFLOW_SHARE_FORWARD = 0.5
_MAX_STEPS_KEPT = 50
_LARGE_INPUT = FP16_MAX / 64

_OPS = {
    "Linear": "linear", "Conv1d": "conv1d", "Conv2d": "conv2d", "Conv3d": "conv3d",
    "ConvTranspose1d": "conv_transpose1d", "ConvTranspose2d": "conv_transpose2d",
    "LayerNorm": "layer_norm", "GroupNorm": "group_norm", "BatchNorm1d": "batch_norm",
    "BatchNorm2d": "batch_norm", "RMSNorm": "rms_norm", "Embedding": "embedding",
    "Softmax": "softmax", "GELU": "gelu", "SiLU": "silu", "ReLU": "relu", "Tanh": "tanh",
    "Conv1D": "addmm", "MultiheadAttention": "multi_head_attention_forward",
}  # fmt: skip


def module_op_name(module: nn.Module | None, module_type: str | None, leaf: bool) -> str | None:
    """The op a module of this type runs, as its functional (`Linear` -> `linear`), for the advice."""
    if module_type is None:
        return None
    if leaf:
        return _OPS.get(module_type, f"{module_type}.forward")
    return f"an op in {module_type}.forward (outside its children)"


def _device(module: nn.Module | None) -> str:
    """The device type of the module's tensors: autocast and GradScaler snippets take it."""
    if module is not None:
        for t in (*module.parameters(), *module.buffers()):
            return t.device.type
    return "cuda"


def _source(module: nn.Module | None) -> tuple[str | None, int | None]:
    if module is None:
        return None, None
    try:
        forward = type(module).forward
        return inspect.getsourcefile(forward), inspect.getsourcelines(forward)[1]
    except (TypeError, OSError):
        return None, None


def _context(path: str | None, modules: dict[str, nn.Module]) -> set[str]:
    ctx: set[str] = set()
    root = modules.get("")
    chain = [root] if root is not None else []
    if path:
        parts = path.split(".")
        chain += [modules.get(".".join(parts[: i + 1])) for i in range(len(parts))]
    for module in chain:
        if module is None:
            continue
        name = type(module).__name__
        if "Autoencoder" in name or (
            name in ("VQModel", "Decoder", "Encoder") and "diffusers" in type(module).__module__
        ):
            ctx.add("diffusers-vae")
    if path and any(p in ("vae", "first_stage_model") for p in path.split(".")):
        ctx.add("diffusers-vae")
    if root is not None and type(root).__module__.startswith("transformers."):
        ctx.add("transformers")
    return ctx


class Advisor:
    """Turns what the monitor measured into findings in `report`, folding repeats over steps."""

    def __init__(
        self, report: Report, evidence: Callable[[str | None], dict[str, Any]] | None = None
    ) -> None:
        self.report = report
        self.evidence = evidence or (lambda path: {})  # the user's name for a path's model, its places
        self._producers: dict[tuple, tuple[Finding, set[str], dict[str, Any]]] = {}
        self.regions: dict[str | None, Any] = {}  # module path → (file, line, text) of its autocast region
        # (phase, name) → [dtype, max finite absmax, below-tiny count, non-zero count, min non-zero]
        self._ranges: dict[tuple[str, str], list[Any]] = {}

    # -- non-finite producers -------------------------------------------------------------------
    def producer(self, p: Producer, modules: dict[str, nn.Module]) -> Finding:
        code = FP16_OVERFLOW if p.dtype == "float16" and p.kind != "input" else NONFINITE_VALUES
        key = (code, p.phase, p.kind, p.path, p.param)
        if key in self._producers:
            finding = self._producers[key][0]
            finding.count += 1
            steps = finding.data["steps"]
            if len(steps) < _MAX_STEPS_KEPT:
                steps.append(p.step)
            return finding
        module = modules.get(p.path) if p.path is not None else None
        ctx = _context(p.path, modules) | {p.phase}
        op = module_op_name(module, p.module_type, p.leaf)
        if p.phase == "backward" and op:
            op = f"{op} (backward)"
        file, line = _source(module) if (not p.leaf or p.kind == "inline") else (None, None)
        where = f"'{p.path or '<root>'}'" if p.path is not None else "the loss"
        biggest_input = max((o.absmax for o in p.inputs if math.isfinite(o.absmax)), default=0.0)
        if biggest_input > _LARGE_INPUT:
            ctx.add("large-input")
        root = modules.get("")
        names: dict[str, Any] = {
            "module": p.path or "<root>",
            "modules": repr([p.path]) if p.path else "[]",
            "leaf": (p.path or "").rpartition(".")[2] or "<root>",
            "model_class": type(root).__name__ if root is not None else "Model",
            "where": where,
            "input_absmax": fmt(biggest_input),
            "scale": 2 ** max(1, math.ceil(math.log2(max(biggest_input, 1.0) / (FP16_MAX / 64)))),
            "dtype": f"torch.{p.dtype}",
            "device": _device(module if module is not None else root),
        }
        known = self.evidence(p.path)
        in_root = known.pop("in_root", p.path)
        names.update(known, modules=repr([in_root]) if in_root else "[]")
        if not names["leaf"].isidentifier():  # an index in a list, or the model itself
            ctx.add("leaf-not-a-name")
        finding = catalog.finding(
            code,
            context=ctx,
            names=names,
            message=_message(p),
            location=Location(
                module=p.path, module_type=p.module_type, op=op, file=file, line=line, step=p.step
            ),
            operands=[
                Operand(
                    role=f"input {o.name}",
                    dtype=o.dtype,
                    shape=list(o.shape),
                    name=_range_text(o),
                )
                for o in p.inputs
            ],
            evidence=[Evidence(text=t) for t in _evidence(p)],
            data={
                "phase": p.phase,
                "kind": p.kind,
                "value": p.value,
                "steps": [p.step],
                "passed_on": p.passed_on[:20],
                "passed_on_count": len(p.passed_on),
                "param": p.param,
                "inputs": [
                    {
                        "name": o.name,
                        "dtype": o.dtype,
                        "absmax": o.absmax,
                        "min_nonzero": _measured(o.min_nonzero),
                    }
                    for o in p.inputs
                ],
                "fp32_absmax": None,
                "keep_fp32": [p.path] if p.path and p.kind in ("module", "inline") else [],
            },
        )
        if p.consequence_of is not None:
            _consequence(finding, p)
        bad_params = _nonfinite_params(module, p) if p.phase == "forward" else []
        if bad_params:
            _param_overflow(finding, p, bad_params, names)
        _drop_empty_keep(finding)
        self.report.add(finding)
        self._producers[key] = (finding, ctx, names)
        autocast_entry.annotate(finding, p, module, self.regions.get(p.path))  # the region chose its dtype
        return finding

    def shadow(self, path: str, fp32_absmax: float) -> None:
        """The producer re-run in float32: is it the range (bf16 fits) or an op's intermediate?"""
        for (code, phase, _kind, p_path, _param), (finding, ctx, names) in self._producers.items():
            if phase != "forward" or p_path != path or finding.data.get("fp32_absmax") is not None:
                continue
            finding.data["fp32_absmax"] = fp32_absmax
            if finding.data.get("nonfinite_params"):
                continue  # the parameter itself is inf: the float32 re-run says nothing about the range
            names["fp32_absmax"] = fmt(fp32_absmax)
            if not math.isfinite(fp32_absmax):
                note = "In float32 this output is non-finite too: not a float16 range problem."
            elif fp32_absmax > FP16_MAX:
                note = (
                    f"In float32 this output reaches {fmt(fp32_absmax)}: above float16's 65504, "
                    f"well within bfloat16's {fmt(BF16_MAX)}."
                )
                if fp32_absmax < BF16_MAX:
                    ctx.add("bf16-fits")
                if names.get("dtype") == "torch.float16":
                    # kept alone, its float32 output is cast back to float16 at its border and overflows
                    # again: the keep-set is the module around it, or none at the top level
                    parent = path.rpartition(".")[0]
                    names["modules"] = repr([parent]) if parent else "[]"
                if "large-input" in ctx:
                    names["scale"] = 2 ** math.ceil(math.log2(fp32_absmax / (FP16_MAX / 4)))
            else:
                note = (
                    f"In float32 the output itself stays at {fmt(fp32_absmax)}: an intermediate inside "
                    "the op overflowed (e.g. a sum of squares in a norm); keep it in float32."
                )
            finding.message += " " + note
            finding.fixes = catalog.fixes_for(code, ctx, **names)
            _drop_empty_keep(finding)

    # -- ranges ---------------------------------------------------------------------------------
    def ranges(
        self,
        records: list[Call | Sighting],
        grads: list[Grad],
        values: list[list[float]],
        infos: list[TensorInfo],
    ) -> None:
        seen: set[int] = set()
        for rec in records:
            if isinstance(rec, Call):
                for slot in rec.out_slots:
                    if slot not in seen and slot not in rec.in_slots:
                        seen.add(slot)
                        self._add("forward", rec.path, values[slot], infos[slot])
        for grad in grads:
            if grad.param is not None:
                self._add("backward", grad.param, values[grad.slot], infos[grad.slot])

    def _add(self, phase: str, name: str, row: list[float], info: TensorInfo) -> None:
        key = (phase, name)
        entry = self._ranges.get(key)
        if entry is None:
            entry = self._ranges[key] = [info.dtype, 0.0, 0.0, 0.0, math.inf]
        absmax = row[ABSMAX]
        if math.isfinite(absmax):
            if absmax > entry[1]:
                entry[1] = absmax
            if is_light(row):
                return
            entry[2] += row[N_TINY]
            entry[3] += info.numel - row[N_ZERO]
            if row[MIN_NONZERO] < entry[4]:
                entry[4] = row[MIN_NONZERO]

    def finish(self, modules: dict[str, nn.Module]) -> None:
        """Summary findings over all monitored steps: headroom and underflow."""
        self._headroom(modules)
        for phase in ("forward", "backward"):
            self._underflow(phase, modules)

    def _headroom(self, modules: dict[str, nn.Module]) -> None:
        for low, limit in ((True, FP16_MAX / HEADROOM_FACTOR), (False, FP16_MAX)):
            hits = {
                name: e[1]
                for (phase, name), e in self._ranges.items()
                if phase == "forward"
                and (e[0] == "float16") == low
                and e[0] in ("float16", "float32", "float64")
                and e[1] > limit
            }
            if not hits:
                continue
            worst = max(hits, key=lambda n: hits[n])
            listing = ", ".join(f"'{n}' {fmt(v)}" for n, v in sorted(hits.items(), key=lambda kv: -kv[1])[:5])
            more = f" and {len(hits) - 5} more" if len(hits) > 5 else ""
            if low:
                message = f"{len(hits)} float16 module output(s) within {HEADROOM_FACTOR:g}× of 65504: {listing}{more}."
            else:
                message = f"{len(hits)} module output(s) exceed 65504 and would overflow in float16: {listing}{more}."
            self._summary(
                FP16_HEADROOM, worst, hits, message, modules, Severity.WARNING if low else Severity.INFO
            )

    def _underflow(self, phase: str, modules: dict[str, nn.Module]) -> None:
        share = UNDERFLOW_SHARE if phase == "backward" else UNDERFLOW_SHARE_FORWARD
        hits = {
            name: e[2] / e[3]
            for (ph, name), e in self._ranges.items()
            if ph == phase and e[0] in ("float16", "float32", "float64") and e[3] and e[2] / e[3] >= share
        }
        if not hits:
            return
        dtypes = {self._ranges[(phase, n)][0] for n in hits}
        low = "float16" in dtypes
        what = "gradients of" if phase == "backward" else "outputs of"
        worst = max(hits, key=lambda n: hits[n])
        listing = ", ".join(
            f"'{n}' {share:.0%} (smallest {fmt(self._ranges[(phase, n)][4])})"
            for n, share in sorted(hits.items(), key=lambda kv: -kv[1])[:5]
        )
        more = f" and {len(hits) - 5} more" if len(hits) > 5 else ""
        verb = "are subnormal in float16" if low else "would underflow in float16"
        message = f"Non-zero {what} {len(hits)} tensor(s) {verb} (below 6.1e-05): {listing}{more}."
        module = worst.rpartition(".")[0] if phase == "backward" else worst
        self._summary(
            FP16_UNDERFLOW,
            module,
            hits,
            message,
            modules,
            Severity.WARNING if low else Severity.INFO,
            phase,
        )

    def _summary(
        self,
        code: str,
        worst: str,
        hits: dict[str, float],
        message: str,
        modules: dict[str, nn.Module],
        severity: Severity,
        phase: str = "forward",
    ) -> None:
        ctx = _context(worst, modules) | {phase}
        module = modules.get(worst)
        names = {
            "module": worst,
            "modules": repr(sorted(hits)[:8]),
            "factor": f"{HEADROOM_FACTOR:g}",
            "device": _device(module if module is not None else modules.get("")),
        }
        self.report.add(
            catalog.finding(
                code,
                context=ctx,
                names=names,
                severity=severity,
                message=message,
                location=Location(
                    module=worst, module_type=type(module).__name__ if module is not None else None
                ),
                data={"phase": phase, "tensors": hits},
            )
        )


def _nonfinite_params(module: nn.Module | None, p: Producer) -> list[str]:
    """Qualified names of the producer's parameters that are inf/NaN themselves (overflowed on the cast)."""
    if module is None or p.kind != "module":
        return []
    import torch

    prefix = f"{p.path}." if p.path else ""
    found = []
    for name, param in module.named_parameters(recurse=not p.leaf):
        if param.is_floating_point() and param.numel() and not bool(torch.isfinite(param).all()):
            found.append(prefix + name)
    return found


def _param_overflow(finding: Finding, p: Producer, params: list[str], names: dict[str, Any]) -> None:
    """The weight, not the computation, is non-finite: say so and fix the cast, not the op."""
    named = ", ".join(f"'{n}'" for n in params[:5]) + (" ..." if len(params) > 5 else "")
    where = f"'{p.path}'" if p.path else "the model"
    limit = "65504" if p.dtype == "float16" else f"the range of {p.dtype}"
    finding.message += (
        f" The parameter {named} is itself non-finite in {p.dtype}: its values overflowed "
        f"(|x| > {limit}) when the model was cast to {p.dtype}, so every output of this module is lost."
    )
    finding.data["nonfinite_params"] = params
    finding.data["keep_fp32"] = [p.path] if p.path else []
    at = {k: names[k] for k in ("model", "places") if k in names}  # the user's name and lines
    keep = remedies.make(
        KEEP_OVERFLOWED, path=p.path, want=p.dtype, where=where, named=named, limit=limit, **at
    )
    finding.fixes = [*([keep] if keep else []), *(f for f in finding.fixes if "bfloat16" in f.title)]


def _consequence(finding: Finding, p: Producer) -> None:
    """Backward inf/NaN inherited from a forward producer: say so, fix nothing here."""
    cause = f"'{p.consequence_of}'"
    grad = f"The gradient of parameter '{p.param}'" if p.param else f"The backward of '{p.path or '<root>'}'"
    finding.message = (
        f"{grad} became {p.value} ({p.dtype}) at step {p.step} as a consequence of the forward "
        f"overflow in {cause}: the forward input of '{p.path or '<root>'}' was already non-finite, so "
        f"its gradient could not be finite. Fix {cause} first (the forward finding); loss scaling "
        "cannot help here."
    )
    finding.severity = Severity.INFO
    finding.cause = (
        "Backward through a module whose forward input was already inf/NaN gives inf/NaN gradients "
        "whatever the dtype: the cause is the forward producer, not this backward."
    )
    finding.fixes = []
    finding.data["consequence_of"] = p.consequence_of


def _drop_empty_keep(finding: Finding) -> None:
    """A keep-in-float32 fix naming no module fixes nothing: never offer it."""
    finding.fixes = [
        f
        for f in finding.fixes
        if "keep_in_fp32(model, [])" not in (f.snippet or "") and "Keep []" not in f.title
    ]


def _message(p: Producer) -> str:
    where = f"'{p.path or '<root>'}'" + (f" ({p.module_type})" if p.module_type else "")
    passed = ""
    if p.passed_on:
        passed = f"; {len(p.passed_on)} later module(s) only passed it on (last: '{p.passed_on[-1]}')"
    if p.phase == "forward":
        if p.kind == "module":
            return f"{where} produced {p.value} in {p.dtype} from finite inputs at step {p.step}{passed}."
        if p.kind == "inline":
            return (
                f"{p.value} first appears in {p.dtype} between modules: an op in the forward of {where} "
                f"made the input {p.inputs[0].name} of its child at step {p.step}{passed}."
            )
        return f"The model input {p.inputs[0].name} of {where} is already {p.value} at step {p.step}{passed}."
    if p.kind == "weight-grad":
        return (
            f"The gradient of parameter '{p.param}' became {p.value} ({p.dtype}) at step {p.step} while the "
            f"gradient reaching the output of {where} was finite: the weight gradient overflowed in backward."
        )
    if p.kind == "loss":
        return (
            f"The gradient arriving at the model output is already {p.value} at step {p.step}: the loss, or "
            "the scale applied to it, overflowed before backward reached the model."
        )
    return (
        f"The backward of {where} turned finite output gradients into {p.value} ({p.dtype}) input "
        f"gradients at step {p.step}: a backward-only overflow (the forward stayed finite)."
    )


def _measured(value: float) -> float | None:
    """None for a statistic a range-only step did not measure (NaN)."""
    return None if math.isnan(value) else value


def _range_text(o: AnalysedOperand) -> str:
    """'abs-max X, smallest non-zero Y'; the smallest non-zero only where the step counted it."""
    if math.isnan(o.min_nonzero):
        return f"abs-max {fmt(o.absmax)}"
    return f"abs-max {fmt(o.absmax)}, smallest non-zero {fmt(o.min_nonzero)}"


def _evidence(p: Producer) -> list[str]:
    lines = [f"input {o.name} ({o.dtype} {'x'.join(map(str, o.shape))}): {_range_text(o)}" for o in p.inputs]
    if p.passed_on:
        lines.append(
            "passed on by: " + ", ".join(p.passed_on[:10]) + (" ..." if len(p.passed_on) > 10 else "")
        )
    return lines
