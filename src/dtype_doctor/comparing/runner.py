"""Builds, runs, times and measures the variants of one comparison."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch

from ..catalog.family_codes import UNKNOWN
from ..errors import DoctorError
from ..inputs import batch_size
from ..loading import call_factory
from ..repair.keep import keep_in_fp32
from ..report import Finding, Report, Severity
from ..tensors import cast_floats, float_tensors, has_nonfinite, map_tensors
from .attribution import LayerError, first_nonfinite, input_dtypes, shadow_errors
from .device import collect
from .measure import PeakMemory, error_stats, grad_error_stats, tensor_bytes, time_runs
from .precision import Precision
from .results import VariantResult

_LOSS_SCALE_START = 2.0**16


class Runner:
    """Builds, runs, times and measures the variants of one comparison."""

    def __init__(
        self,
        factory: Callable[[], Any],
        args: tuple,
        kwargs: dict,
        device: torch.device,
        train_step: bool,
        loss_fn: Callable[[Any], torch.Tensor] | None,
        warmup: int,
        repeats: int,
        seed: int,
    ) -> None:
        self.factory = factory
        self.args, self.kwargs = args, kwargs
        self.device = device
        self.train_step = train_step
        self.loss_fn = loss_fn or _default_loss
        self.warmup, self.repeats = warmup, repeats
        self.seed = seed
        self.batch = batch_size(args, kwargs)
        self.fp32_state: dict[str, torch.Tensor] = {}
        self.reference_out: Any = None
        self.reference_grads: dict[str, torch.Tensor] = {}
        self.reference_model: torch.nn.Module | None = None
        self.total_params = 0

    # -- building

    def prepare(self) -> None:
        """Build and run the fp32 model once: its weights are every variant's weights, and a
        broken reference is reported before anything is measured (this also warms up torch)."""
        p = Precision(torch.float32)
        model = self.build(p)
        try:
            if self.train_step:
                self.step_fn(model, p, [1.0])()
            else:
                self.forward_fn(model, p)()
        except DoctorError:
            raise
        except Exception as exc:
            raise DoctorError(
                f"the fp32 reference run failed: {type(exc).__name__}: {_first_line(exc)}"
            ) from None
        # on the host: a second fp32 copy of the weights must not take accelerator memory
        self.fp32_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
        del model
        collect(self.device)

    def build(self, p: Precision, keep_strategy: str = "fp32-out") -> torch.nn.Module:
        torch.manual_seed(self.seed)
        model = call_factory(self.factory, "model factory")
        if not isinstance(model, torch.nn.Module):
            raise DoctorError(f"the factory returned {type(model).__name__}, not a torch.nn.Module")
        if self.fp32_state:
            # the factory may not be deterministic: give every variant the reference weights
            with contextlib.suppress(Exception):
                model.load_state_dict(self.fp32_state, strict=False)
        model = model.to(self.device)
        if not p.autocast and p.dtype != torch.float32:
            model = model.to(p.dtype)
        if p.keep and p.autocast:  # kept outputs stay fp32: autocast casts them where it needs to
            keep_in_fp32(model, list(p.keep), strategy="fp32-out")
        elif p.keep:
            keep_in_fp32(
                model, list(p.keep), strategy=keep_strategy, out_dtype=p.dtype, fp32_state=self.fp32_state
            )
        # eval: dropout off, batch-norm statistics frozen, so variants compute the same function
        model.eval()
        return model

    def context(self, p: Precision) -> contextlib.AbstractContextManager:
        if p.autocast:
            return torch.autocast(self.device.type, dtype=p.dtype)
        return contextlib.nullcontext()

    def inputs(self, p: Precision) -> tuple[tuple, dict]:
        if p.autocast or p.dtype == torch.float32:
            return self.args, self.kwargs
        return cast_floats(self.args, p.dtype), cast_floats(self.kwargs, p.dtype)

    # -- running

    def forward_fn(self, model: torch.nn.Module, p: Precision) -> Callable[[], Any]:
        args, kwargs = self.inputs(p)

        def forward() -> Any:
            with torch.inference_mode(), self.context(p):
                return model(*args, **kwargs)

        return forward

    def step_fn(self, model: torch.nn.Module, p: Precision, scale: list[float]) -> Callable[[], Any]:
        args, kwargs = self.inputs(p)
        params = [q for q in model.parameters() if q.requires_grad]

        def step() -> Any:
            for q in params:
                q.grad = None
            with self.context(p):
                out = model(*args, **kwargs)
                loss = self.loss_fn(out)
            (loss.float() * scale[0]).backward()
            return out

        return step

    def run_variant(
        self, p: Precision, keep_strategy: str = "fp32-out"
    ) -> tuple[VariantResult, torch.nn.Module | None]:
        result = VariantResult(p, keep_strategy=keep_strategy if p.keep else None)
        model: torch.nn.Module | None = None
        scale = [_LOSS_SCALE_START if p.dtype == torch.float16 else 1.0]
        out: Any = None
        with PeakMemory(self.device) as mem:
            try:
                model = self.build(p, keep_strategy)
                result.weights_bytes = tensor_bytes(model)
                if self.train_step:
                    step = self.step_fn(model, p, scale)
                    out = step()
                    if scale[0] > 1:
                        out = self._find_loss_scale(model, step, scale)
                    fn = step
                else:
                    fn = self.forward_fn(model, p)
                    out = fn()
            except Exception as exc:
                if not self._failed(result, exc, model, p):
                    raise
        result.peak_bytes, result.memory_method = mem.peak_bytes, mem.method
        if result.status == "ok":
            # timed outside PeakMemory: its RSS sampler thread would be timed with the model
            try:
                result.timing = time_runs(fn, self.device, self.warmup, self.repeats)
            except Exception as exc:
                if not self._failed(result, exc, model, p):
                    raise
        if result.status != "ok":
            return result, model
        if self.train_step and p.dtype == torch.float16:
            result.loss_scale = scale[0]
        result.throughput = self.batch / result.median if result.median > 0 else None
        grads = _grads(model, scale[0]) if self.train_step else {}
        if p.is_reference:
            self.reference_out = _detach(out)
            self.reference_grads = grads
            result.error = error_stats(out, out)
            result.grad_error = grad_error_stats(grads, grads) if grads else {}
            return result, model
        result.error = error_stats(out, self.reference_out)
        if grads:
            result.grad_error = grad_error_stats(grads, self.reference_grads)
        if has_nonfinite(out) or (grads and result.grad_error.get("nonfinite")):
            result.status = "overflows"
            forward = self.forward_fn(model, p)
            result.nonfinite_module = first_nonfinite(model, lambda m: forward())
        return result, model

    def _find_loss_scale(self, model: torch.nn.Module, step: Callable[[], Any], scale: list[float]) -> Any:
        """Dynamic loss scaling as GradScaler does it: halve until the gradients are finite."""
        out = None
        while scale[0] >= 1.0:
            grads = [q.grad for q in model.parameters() if q.grad is not None]
            if all(bool(torch.isfinite(g).all()) for g in grads):
                return out
            scale[0] /= 2
            out = step()
        scale[0] = 1.0
        return step()

    def _failed(self, result: VariantResult, exc: BaseException, model: Any, p: Precision) -> bool:
        if isinstance(exc, DoctorError) and model is None:
            return False  # the factory itself is broken: the user's problem, not a precision's
        oom = type(exc).__name__ == "OutOfMemoryError"
        result.status = "out-of-memory" if oom else "fails"
        result.failure = f"{type(exc).__name__}: {_first_line(exc)}"
        if oom and self.device.type == "cuda":
            torch.cuda.empty_cache()
        if model is not None and not oom:
            result.findings = _diagnose(exc, model, self.forward_fn(model, p))
        else:
            result.findings = _explain(str(exc))
        return True

    def retime_reference(self, result: VariantResult) -> None:
        """Time the fp32 reference again after all variants and pool the samples, so that
        load drifting during a long comparison does not favour the variants measured later."""
        model, p = self.reference_model, result.precision
        if model is None or result.timing is None:
            return
        fn = self.step_fn(model, p, [1.0]) if self.train_step else self.forward_fn(model, p)
        again = time_runs(fn, self.device, 0, self.repeats)
        result.timing.drift = again.median / result.timing.median if result.timing.median > 0 else None
        result.timing.samples += again.samples
        result.throughput = self.batch / result.median if result.median > 0 else None

    # -- attribution

    def attribute(self, result: VariantResult, model: torch.nn.Module) -> list[LayerError]:
        reference = self.reference_model
        if reference is None:
            return []
        p = result.precision

        def run(ref: torch.nn.Module) -> Any:
            return ref(*self.args, **self.kwargs)

        forward = self.forward_fn(model, p)
        return shadow_errors(
            reference,
            model,
            run,
            input_dtype=None if p.autocast else p.dtype,
            context=lambda: self.context(p),
            seen_dtypes=input_dtypes(model, lambda m: forward()),
        )


def _default_loss(out: Any) -> torch.Tensor:
    tensors = [t for _, t in float_tensors(out)]
    if not tensors:
        raise DoctorError("train_step: the model returned no float tensor to make a loss from")
    return sum(t.float().pow(2).mean() for t in tensors)  # type: ignore[return-value]


def _grads(model: torch.nn.Module, scale: float) -> dict[str, torch.Tensor]:
    return {n: q.grad.detach().float() / scale for n, q in model.named_parameters() if q.grad is not None}


def _detach(out: Any) -> Any:
    return map_tensors(out, lambda t: t.detach())


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _diagnose(exc: BaseException, model: torch.nn.Module, forward: Callable[[], Any]) -> list[Finding]:
    """Findings that say why a variant failed: watch re-runs it live, explain reads the text."""
    findings: list[Finding] = []
    try:
        from ..watching import watch
    except ImportError:
        watch = None  # type: ignore[assignment]
    if watch is not None:
        try:
            session = watch(model=model, mode="observe")
            with contextlib.suppress(Exception), session:
                forward()
            findings = [f for f in session.report.findings if f.severity != Severity.INFO]
        except Exception:
            findings = []
    return findings or _explain(str(exc))


def _explain(text: str) -> list[Finding]:
    try:
        from ..explaining import explain

        result = explain(text)
    except Exception:
        return []
    if isinstance(result, Finding):
        return [result]
    if isinstance(result, Report):
        return [f for f in result.findings if f.code != UNKNOWN]
    if isinstance(result, list):
        return [f for f in result if isinstance(f, Finding)]
    return []
