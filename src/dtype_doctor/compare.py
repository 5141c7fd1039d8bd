"""`compare`: run one model in fp32, fp16, bf16 and under autocast, side by side, on this hardware.

For each precision: does it run (and if not, why), median latency after warm-up with its
spread, throughput, peak memory, and error against the fp32 reference for outputs and, for a
training step, gradients. For each low precision that runs: the modules that lose the most
(attribution.py) and what keeping them in fp32 buys back. Ends with a recommendation.

Every variant's model comes from the user's factory (seeded, then loaded with the reference
weights, so all variants compute the same function).
"""

from __future__ import annotations

import contextlib
import copy
import gc
import math
import platform
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from . import catalog
from ._callable import make_callable
from .attribution import (
    LayerError,
    first_nonfinite,
    input_dtypes,
    keep_in_fp32,
    rank,
    select_modules,
    shadow_errors,
    top_modules,
)
from .dtypes import canonical
from .errors import DoctorError
from .loading import TensorSpec, call_factory, parse_input, spec_from_tuple
from .measure import (
    ErrorStats,
    PeakMemory,
    Timing,
    cast_floats,
    error_stats,
    float_tensors,
    grad_error_stats,
    has_nonfinite,
    release_host_memory,
    tensor_bytes,
    time_runs,
)
from .report import Evidence, Finding, Location, Report, Severity

DEFAULT_PRECISIONS = ("fp32", "fp16", "bf16", "autocast-fp16", "autocast-bf16")
_SHORT = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64"}
_LOSS_SCALE_START = 2.0**16
_MIN_SAMPLES = 3  # fewer timed runs than this: no speed claim either way


@dataclass(frozen=True)
class Precision:
    """One way to run the model: a full cast to `dtype`, or fp32 weights under autocast(`dtype`)."""

    dtype: torch.dtype
    autocast: bool = False
    keep: tuple[str, ...] = ()

    @property
    def short(self) -> str:
        return _SHORT.get(str(self.dtype).removeprefix("torch."), str(self.dtype).removeprefix("torch."))

    @property
    def name(self) -> str:
        base = f"autocast-{self.short}" if self.autocast else self.short
        return f"{base}+keep{len(self.keep)}" if self.keep else base

    @property
    def is_reference(self) -> bool:
        return self.dtype == torch.float32 and not self.autocast and not self.keep


def parse_precision(text: str) -> Precision:
    """'fp16', 'bf16', 'fp32', 'autocast-fp16', 'amp-bf16', 'autocast_float16', 'half'..."""
    raw = text.strip().lower()
    autocast = False
    for prefix in ("autocast-", "autocast_", "autocast:", "amp-", "amp_", "mixed-"):
        if raw.startswith(prefix):
            autocast, raw = True, raw[len(prefix) :]
            break
    name = canonical(raw)
    if name is None or not name.startswith(("float", "bfloat")) or name.startswith("float8"):
        raise DoctorError(f"unknown precision {text!r}: expected e.g. fp32, fp16, bf16, autocast-fp16")
    if autocast and name not in ("float16", "bfloat16"):
        raise DoctorError(f"autocast runs in fp16 or bf16, not {name} ({text!r})")
    return Precision(getattr(torch, name), autocast)


# ---------------------------------------------------------------------------------------------
# results


@dataclass
class VariantResult:
    precision: Precision
    status: str = "ok"  # ok | overflows | fails | out-of-memory
    timing: Timing | None = None
    peak_bytes: int | None = None
    memory_method: str = ""
    weights_bytes: int | None = None
    error: ErrorStats | None = None
    grad_error: dict[str, Any] = field(default_factory=dict)
    loss_scale: float | None = None
    throughput: float | None = None
    failure: str | None = None
    nonfinite_module: tuple[str, str] | None = None
    findings: list[Finding] = field(default_factory=list)
    layers: list[LayerError] = field(default_factory=list)
    keep_strategy: str | None = None

    @property
    def name(self) -> str:
        return self.precision.name

    @property
    def median(self) -> float:
        return self.timing.median if self.timing and self.timing.samples else math.nan

    def to_dict(self) -> dict[str, Any]:
        p = self.precision
        return {
            "name": p.name,
            "dtype": str(p.dtype).removeprefix("torch."),
            "autocast": p.autocast,
            "keep_fp32": list(p.keep),
            "keep_strategy": self.keep_strategy,
            "status": self.status,
            "failure": self.failure,
            "nonfinite_module": list(self.nonfinite_module) if self.nonfinite_module else None,
            "timing": self.timing.to_dict() if self.timing else None,
            "throughput_per_s": self.throughput,
            "peak_memory_bytes": self.peak_bytes,
            "memory_method": self.memory_method,
            "weights_bytes": self.weights_bytes,
            "error": self.error.to_dict() if self.error else None,
            "grad_error": self.grad_error or None,
            "loss_scale": self.loss_scale,
            # ranked modules first, then the containers their children explain (explained_by set)
            "layers": [layer.to_dict() for layer in rank(self.layers)[:20]]
            + [layer.to_dict() for layer in self.layers if layer.explained_by][:20],
        }


# ---------------------------------------------------------------------------------------------
# inputs


def _make_inputs(inputs: Any, device: torch.device, seed: int) -> tuple[tuple, dict]:
    """Anything the user can pass as inputs → (args, kwargs) of real tensors on `device`."""
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        if isinstance(inputs, Mapping):
            return (), {k: _one_input(v, device) for k, v in inputs.items()}
        if (
            isinstance(inputs, tuple)
            and len(inputs) == 2
            and isinstance(inputs[0], (tuple, list))
            and isinstance(inputs[1], Mapping)
        ):
            return tuple(_one_input(v, device) for v in inputs[0]), {
                k: _one_input(v, device) for k, v in inputs[1].items()
            }
        if isinstance(inputs, (list, tuple)) and not _is_spec_tuple(inputs):
            return tuple(_one_input(v, device) for v in inputs), {}
        return (_one_input(inputs, device),), {}
    finally:
        torch.random.set_rng_state(gen_state)


def _is_spec_tuple(value: Any) -> bool:
    return isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, str) for v in value)


def _one_input(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, TensorSpec):
        return value.make(device)
    if isinstance(value, str):
        return parse_input(value).make(device)
    if _is_spec_tuple(value):
        return spec_from_tuple(value).make(device)
    return value  # a Python scalar, None, a config object: passed as given


def _batch_size(args: tuple, kwargs: dict) -> int:
    for t in [*args, *kwargs.values()]:
        if isinstance(t, torch.Tensor) and t.dim() > 0:
            return int(t.shape[0])
    return 1


# ---------------------------------------------------------------------------------------------
# one variant


class _Runner:
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
        self.batch = _batch_size(args, kwargs)
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
        _collect(self.device)

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
        if p.keep:
            keep_in_fp32(
                model,
                p.keep,
                p.dtype,
                self.device.type if p.autocast else None,
                self.fp32_state,
                keep_strategy,
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
                result.timing = time_runs(fn, self.device, self.warmup, self.repeats)
            except Exception as exc:
                if not self._failed(result, exc, model, p):
                    raise
        result.peak_bytes, result.memory_method = mem.peak_bytes, mem.method
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
        result.timing.samples += time_runs(fn, self.device, 0, self.repeats).samples
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
    from .measure import map_tensors

    return map_tensors(out, lambda t: t.detach())


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _diagnose(exc: BaseException, model: torch.nn.Module, forward: Callable[[], Any]) -> list[Finding]:
    """Findings that say why a variant failed: watch re-runs it live, explain reads the text."""
    findings: list[Finding] = []
    try:
        from .watch import watch
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
        from .explain import explain

        result = explain(text)
    except Exception:
        return []
    if isinstance(result, Finding):
        return [result]
    if isinstance(result, Report):
        return [f for f in result.findings if f.code != "unknown"]
    if isinstance(result, list):
        return [f for f in result if isinstance(f, Finding)]
    return []


# ---------------------------------------------------------------------------------------------
# the public entry point


def compare(
    model_factory: Callable[[], Any] | torch.nn.Module,
    inputs: Any,
    precisions: Sequence[str] = DEFAULT_PRECISIONS,
    keep_fp32: Iterable[str] | str | None = "auto",
    train_step: bool = False,
    *,
    device: str | torch.device | None = None,
    warmup: int = 2,
    repeats: int = 10,
    top_k: int = 3,
    tolerance: float = 2e-2,
    attribution: bool = True,
    loss_fn: Callable[[Any], torch.Tensor] | None = None,
    seed: int = 0,
    progress: bool = False,
) -> Report:
    """Run the model in each precision on this hardware and recommend one, with its reasons.

    model_factory: a callable returning a fresh fp32 nn.Module (called once per variant), or
        a module (deep-copied per variant).
    inputs: a tensor, a sequence of tensors (positional), a mapping (keyword), `(args, kwargs)`,
        or shape specs such as "2x4x64x64:float32" / TensorSpec in any of those places.
    precisions: "fp32", "fp16", "bf16", "autocast-fp16", "autocast-bf16" (other spellings too).
    keep_fp32: "auto" (measure keeping the `top_k` worst modules of each low precision in fp32),
        module paths / globs / class names to keep in fp32, or None for no such rows.
    train_step: also run loss.backward() and compare gradients (fp16 uses dynamic loss scaling).
    tolerance: the largest relative L2 output error (‖low − fp32‖ / ‖fp32‖) a recommendation accepts.
    """
    if repeats < 1 or warmup < 0:
        raise DoctorError("repeats must be ≥ 1 and warmup ≥ 0")
    dev = _device(device)
    wanted = [parse_precision(p) for p in precisions]
    if not any(p.is_reference for p in wanted):
        wanted.insert(0, Precision(torch.float32))
    wanted.sort(key=lambda p: not p.is_reference)  # the reference runs first
    if isinstance(model_factory, torch.nn.Module):
        module = model_factory
        model_factory = lambda: copy.deepcopy(module)  # noqa: E731
    args, kwargs = _make_inputs(inputs, dev, seed)
    runner = _Runner(model_factory, args, kwargs, dev, train_step, loss_fn, warmup, repeats, seed)
    runner.prepare()

    with _progress(progress) as bar:
        task = bar.add_task("compare", total=len(wanted))
        results: list[VariantResult] = []
        for p in wanted:
            bar.update(task, description=f"{p.name}: running")
            result, model = runner.run_variant(p)
            if p.is_reference:
                if result.status != "ok":
                    raise DoctorError(f"the fp32 reference run failed: {result.failure}")
                runner.reference_model = model
                runner.total_params = sum(q.numel() for q in model.parameters())
                keep_fp32 = _resolve_keep(keep_fp32, model)  # a typo fails now, not after every run
            elif result.status in ("ok", "overflows") and attribution and model is not None:
                bar.update(task, description=f"{p.name}: per-layer error")
                result.layers = runner.attribute(result, model)
            if not p.is_reference:
                del model
            results.append(result)
            _collect(dev)
            bar.advance(task)
        for base in [r for r in results if not r.precision.is_reference and r.status != "fails"]:
            keep = _keep_for(base, keep_fp32, top_k, runner.total_params)
            if not keep:
                continue
            p = Precision(base.precision.dtype, base.precision.autocast, tuple(keep))
            bar.update(task, total=_total(bar) + 1, description=f"{p.name}: running")
            result, model = runner.run_variant(p)
            if result.status == "fails" and not p.autocast:
                # a functional op between modules refused mixed dtypes: cast outputs back instead
                del model
                _collect(dev)
                retry, model = runner.run_variant(p, "cast-back")
                if retry.status != "fails":
                    result = retry
            del model
            results.append(result)
            _collect(dev)
            bar.advance(task)

        bar.update(task, description="fp32: timing again")
        runner.retime_reference(results[0])

    from .sections import CompareResult

    report = Report(tool="compare")
    settings = {
        "device": str(dev),
        "device_name": _device_name(dev),
        "torch": torch.__version__,
        "warmup": warmup,
        "repeats": repeats,
        "tolerance": tolerance,
        "train_step": train_step,
        "batch": runner.batch,
        "seed": seed,
        "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32) if dev.type == "cuda" else None,
    }
    for r in results:
        for f in _variant_findings(r, dev, tolerance, top_k, runner.total_params):
            report.add(f)
    report.add(recommend(results, dev, tolerance))
    report.sections.append(CompareResult(settings=settings, variants=[r.to_dict() for r in results]))
    del runner
    return report


def _resolve_keep(keep_fp32: Any, model: torch.nn.Module) -> str | list[str] | None:
    """ "auto", None, or the module paths the user's names, globs and class names select."""
    if keep_fp32 is None or keep_fp32 is False or keep_fp32 == "auto":
        return keep_fp32 or None
    names = [keep_fp32] if isinstance(keep_fp32, str) else list(keep_fp32)
    return select_modules(model, names) if names else None


_MAX_KEEP_SHARE = 1 / 3  # "auto" never keeps a module holding more than this share of the parameters


def _keep_for(
    base: VariantResult, keep_fp32: str | list[str] | None, top_k: int, total_params: int
) -> list[str]:
    if keep_fp32 == "auto":
        return top_modules(
            rank(base.layers), top_k, floor=0.0, max_params=int(total_params * _MAX_KEEP_SHARE)
        )
    return list(keep_fp32 or [])


def _device(device: str | torch.device | None) -> torch.device:
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise DoctorError(f"bad device {device!r}: {exc}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise DoctorError("device 'cuda' asked for, but torch sees no CUDA device here")
    return dev


def _device_name(dev: torch.device) -> str:
    if dev.type == "cuda":
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        major, minor = torch.cuda.get_device_capability(index)
        return f"{torch.cuda.get_device_name(index)} (sm{major}{minor})"
    if dev.type == "cpu":
        try:
            cap = torch.backends.cpu.get_cpu_capability()
        except Exception:
            cap = "?"
        return f"{platform.processor() or platform.machine()} CPU, {torch.get_num_threads()} threads, {cap}"
    return str(dev)


def _collect(dev: torch.device) -> None:
    """Free what the last variant left, so the next one's memory baseline is honest.

    Models are freed by reference counting; a full gc.collect() (slow with torch loaded) is
    worth it only before emptying the CUDA cache.
    """
    if dev.type == "cuda":
        gc.collect()
        torch.cuda.empty_cache()
    release_host_memory()


def _total(bar: Any) -> int:
    return int(bar.tasks[0].total or 0) if hasattr(bar, "tasks") else bar.total


@contextlib.contextmanager
def _progress(enabled: bool):
    """A rich progress bar on stderr, or a silent stand-in with the same methods."""
    if enabled:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        ) as bar:
            yield bar
        return

    yield _SilentProgress()


class _SilentProgress:
    """The few rich.progress.Progress methods compare uses, doing nothing."""

    def __init__(self) -> None:
        self.total = 0

    def add_task(self, *args: Any, total: int = 0, **kwargs: Any) -> int:
        self.total = total
        return 0

    def update(self, *args: Any, total: int | None = None, **kwargs: Any) -> None:
        if total is not None:
            self.total = total

    def advance(self, *args: Any, **kwargs: Any) -> None:
        pass


# ---------------------------------------------------------------------------------------------
# findings and the recommendation


def _names(p: Precision, dev: torch.device) -> dict[str, object]:
    return {"variant": p.name, "dtype": f"torch.{str(p.dtype).removeprefix('torch.')}", "device": dev.type}


def _context(p: Precision) -> list[str]:
    """Catalog context tags: the dtype, and how it is applied ('autocast' or 'cast')."""
    dtype = str(p.dtype).removeprefix("torch.")
    how = "autocast" if p.autocast else "cast"
    return [dtype, how, f"{how}-{dtype}", *(["keep-fp32"] if p.keep else [])]


def _variant_findings(
    r: VariantResult, dev: torch.device, tolerance: float, top_k: int, total_params: int
) -> list[Finding]:
    p = r.precision
    names = _names(p, dev)
    out: list[Finding] = []
    if r.status in ("fails", "out-of-memory"):
        cause_codes = [f.code for f in r.findings]
        f = catalog.finding(
            "precision-variant-failed",
            context=_context(p),
            names=names,
            message=f"{p.name} does not run: {r.failure}",
            evidence=[Evidence(r.failure or "", source=p.name)],
            related=cause_codes + list(catalog.family("precision-variant-failed").related),
            data={"variant": p.name},
        )
        if r.findings:  # what watch/explain found: its location and its fixes come first
            first = r.findings[0]
            f.location = first.location
            f.operands = first.operands
            f.fixes = first.fixes + f.fixes
            f.cause = (first.cause + " " if first.cause else "") + f.cause
        out.append(f)
        return out
    if r.status == "overflows":
        module, module_type = r.nonfinite_module or (None, None)
        out.append(
            catalog.finding(
                "precision-overflow",
                context=_context(p),
                names={**names, "module": module or "an unlocated module"},
                message=f"{p.name}: non-finite outputs"
                + (f", first produced by '{module}' ({module_type})" if module else ""),
                location=Location(module=module, module_type=module_type) if module else None,
                data={"variant": p.name},
            )
        )
    ranked = rank(r.layers)
    keep = top_modules(ranked, top_k, max_params=int(total_params * _MAX_KEEP_SHARE))
    if r.error and r.status == "ok" and r.error.rel_l2 > tolerance and not p.keep:
        out.append(
            catalog.finding(
                "precision-error-high",
                context=_context(p),
                names={**names, "keep": keep},
                severity=Severity.WARNING,
                message=f"{p.name}: output error {r.error.rel_l2:.2g} (relative L2) > tolerance {tolerance:g}"
                + (f"; worst modules: {', '.join(keep)}" if keep else ""),
                data={"variant": p.name},
            )
        )
    troubled = r.status == "overflows" or (r.error is not None and r.error.rel_l2 > tolerance)
    if ranked and keep and troubled and not p.keep:
        top = ranked[: max(top_k, 1)]
        out.append(
            catalog.finding(
                "precision-fragile-layers",
                context=_context(p),
                names={**names, "keep": keep},
                message=f"{p.name}: "
                + ", ".join(
                    f"'{layer.module}' ({layer.module_type}) {_fmt_err(layer.score)}" for layer in top
                ),
                location=Location(module=top[0].module, module_type=top[0].module_type),
                data={"variant": p.name, "layers": [layer.to_dict() for layer in top]},
            )
        )
    return out


def _fmt_err(x: float | None) -> str:
    if x is None or math.isnan(x):
        return "n/a"
    if math.isinf(x):
        return "inf"
    return f"{x:.1e}" if x else "0"


def _faster(a: VariantResult, b: VariantResult) -> bool:
    """a is faster than b beyond noise: a's upper quartile below b's lower quartile (n ≥ 3 each)."""
    if not (a.timing and b.timing) or min(len(a.timing.samples), len(b.timing.samples)) < _MIN_SAMPLES:
        return False
    return a.timing.iqr[1] < b.timing.iqr[0]


def _accepted(r: VariantResult, tolerance: float) -> bool:
    if r.status != "ok" or r.error is None:
        return False
    if r.error.rel_l2 > tolerance:
        return False
    grad = r.grad_error.get("rel_l2") if r.grad_error else None
    return grad is None or grad <= tolerance * 5  # gradients are noisier than outputs


def _reason(r: VariantResult, ref: VariantResult, base: VariantResult | None = None) -> str:
    """One line per variant; a keep row also says what keeping its modules in fp32 bought back."""
    label = r.name
    if r.precision.keep:
        label += f" (keeping {', '.join(repr(m) for m in r.precision.keep)} in fp32)"
    if r.status in ("fails", "out-of-memory"):
        why = f" ({r.findings[0].code})" if r.findings else ""
        return f"{label}: does not run: {r.failure}{why}"
    if r.status == "overflows":
        where = f" in '{r.nonfinite_module[0]}' ({r.nonfinite_module[1]})" if r.nonfinite_module else ""
        return f"{label}: {'still ' if r.precision.keep else ''}overflows{where}"
    ratio = ref.median / r.median if r.median > 0 else math.nan
    if r.precision.is_reference:
        speed = f"{r.median * 1e3:.3g} ms"
    elif _faster(r, ref):
        speed = f"{ratio:.2f}× faster than fp32"
    elif _faster(ref, r):
        speed = f"{1 / ratio:.2f}× slower than fp32"
    elif r.timing and len(r.timing.samples) < _MIN_SAMPLES:
        speed = f"{ratio:.2f}× fp32's speed (too few runs to tell from noise)"
    else:
        speed = f"as fast as fp32 within noise ({ratio:.2f}×)"
    spread = r.timing.to_dict()["spread"] if r.timing else math.nan
    text = f"{label}: {speed} (median of {len(r.timing.samples) if r.timing else 0}, IQR {spread:.0%})"
    if not r.precision.is_reference and r.error:
        text += f", error {_fmt_err(r.error.rel_l2)}"
        if base is not None and base.error is not None:
            text += f" (without keeping: {'overflows' if base.status == 'overflows' else _fmt_err(base.error.rel_l2)})"
        if r.grad_error.get("rel_l2") is not None:
            text += f", gradient error {_fmt_err(r.grad_error['rel_l2'])}"
    if r.peak_bytes is not None and ref.peak_bytes:
        text += f", peak memory {r.peak_bytes / max(ref.peak_bytes, 1):.2f}× fp32"
    return text


def _base_of(r: VariantResult, results: list[VariantResult]) -> VariantResult | None:
    """The plain variant a keep-in-fp32 row was derived from."""
    if not r.precision.keep:
        return None
    p = r.precision
    return next((b for b in results if b.precision == Precision(p.dtype, p.autocast)), None)


def _snippet(p: Precision, dev: torch.device) -> str:
    dtype = f"torch.{str(p.dtype).removeprefix('torch.')}"
    if p.is_reference:
        return "model = model.float()   # keep fp32"
    if p.keep:
        keep = (
            f"from dtype_doctor import to_precision\n# {', '.join(p.keep)} stay fp32, cast at their borders\n"
        )
        if p.autocast:
            return (
                f"{keep}model = to_precision(model, {dtype}, keep_fp32={list(p.keep)!r}, autocast=True)\n"
                f'with torch.autocast("{dev.type}", dtype={dtype}):\n    out = model(x)'
            )
        return (
            f"{keep}model = to_precision(model, {dtype}, keep_fp32={list(p.keep)!r})\n"
            f"out = model(x.to({dtype}))"
        )
    if p.autocast:
        return f'with torch.autocast("{dev.type}", dtype={dtype}):\n    out = model(x)'
    return f"model = model.to({dtype})\nout = model(x.to({dtype}))"


def recommend(results: list[VariantResult], dev: torch.device, tolerance: float) -> Finding:
    """The fastest variant within the tolerance, beating fp32 beyond noise; fp32 otherwise."""
    ref = next(r for r in results if r.precision.is_reference)
    accepted = [r for r in results if _accepted(r, tolerance) and not r.precision.is_reference]
    faster = sorted((r for r in accepted if _faster(r, ref)), key=lambda r: r.median)
    best = faster[0] if faster else ref
    reasons = [_reason(r, ref, _base_of(r, results)) for r in results]
    if best is ref:
        if accepted:
            headline = "fp32: no low-precision variant is faster beyond noise on this hardware" + (
                f" ({_device_name(dev)})" if dev.type == "cpu" else ""
            )
            lighter = min(accepted, key=lambda r: r.weights_bytes or math.inf)
            if lighter.weights_bytes and ref.weights_bytes and lighter.weights_bytes < ref.weights_bytes:
                headline += f"; if memory matters, {lighter.name} halves the weights at error {_fmt_err(lighter.error.rel_l2 if lighter.error else None)}"
        else:
            headline = f"fp32: no low-precision variant runs within the tolerance {tolerance:g}"
    else:
        headline = f"{best.name}: {ref.median / best.median:.2f}× faster than fp32, error {_fmt_err(best.error.rel_l2 if best.error else None)}"
    p = best.precision
    f = catalog.finding(
        "precision-recommendation",
        context=_context(p),
        names={
            **_names(p, dev),
            "snippet": _snippet(p, dev),
            "dtype": f"torch.{str(p.dtype).removeprefix('torch.')}",
        },
        message=headline + "".join(f"\n  · {text}" for text in reasons),
        data={"choice": best.name, "reasons": reasons},
    )
    return f


__all__ = ["DEFAULT_PRECISIONS", "Precision", "VariantResult", "compare", "parse_precision", "recommend"]


make_callable(__name__, "compare")
