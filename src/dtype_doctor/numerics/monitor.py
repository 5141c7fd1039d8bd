"""NumericsMonitor: module hooks that record range statistics and find non-finite producers.

Per monitored step every floating module output (and, in training, every gradient reaching a module
output or a parameter) gets one stats row computed on its device; the rows are read back with one
transfer when the step ends: when the next outermost call starts (its backward belongs to it), at
`step()`, or at `stop()`.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
from torch.overrides import _get_current_function_mode_stack as _function_modes

from ..compile_state import is_dynamo_compiling
from ..report import Report
from ..signatures import call_kwargs as _call_kwargs
from ..tensors import LEAVES, own_paths_collide
from . import advice, autocast_entry, located, shadow
from .accuracy import AccuracyCheck
from .analysis import (
    Call,
    Grad,
    Shadow,
    Sighting,
    TensorInfo,
    backward_producer,
    forward_producers,
    mark_consequence,
)
from .frame import Frame, arg_names, short_dtype_name
from .monitor_grads import Gradients
from .monitor_reruns import ReRuns
from .monitor_traces import OpTraces
from .optrace import OpTrace, Traced
from .opwatch import OpWatch
from .own_ops import own_ops
from .scaler import ScalerMonitor
from .seen import Seen
from .stats import ABSMAX, Rows, measured_tensors

_LOW = (torch.float16, torch.bfloat16)
# the first outermost calls with low-precision ops are traced op by op (a model, then the loss modules
# after it), each read back when it returns: within the monitored warm-up of bench_numerics_ops.py
TRACED_CALLS = (2, 4)  # of roots with parameters (models), of roots without (loss modules)


class NumericsMonitor(Gradients, OpTraces, ReRuns):
    """Watch a model's value ranges; findings go into `report`.

    model: the root whose modules are watched (qualified names from it); None: every outermost
        module called while started is adopted as a root.
    every: monitor one step in N (the others cost one hook call per module).
    underflow_every: of the monitored steps, one in N (the first included) also counts underflow
        and zeros (several ops per tensor); the others measure each tensor's range only (one
        fused `aminmax`: inf and NaN show in it).
    backward: also watch gradients (module outputs and parameters) when autograd runs.
    scaler: watch every torch.amp.GradScaler whose update() runs while started.
    shadow: re-run a forward producer in float32 at its next call, to tell range from precision.
    auto_step: a step ends with each outermost module call; False: only at `step()`.
    accuracy: on the first low-precision step, re-run every module call on a float32 copy and
        report finite outputs further than `accuracy_threshold` (relative L2) from it, naming
        the op inside (at the module's next call).
    ops: the op-level checks (`opwatch`): constants and positions the low dtype cannot hold, and,
        between module calls in the user's code, results that overflow or updates it absorbs.
    name_of: how the caller names a module (`run`'s names), for the findings; origin_of: where a
        tensor was made (the watch's provenance), for the op-level findings; aside(True/False):
        around the monitor's own runs of modules, so a watch beside it ignores them (the tool's).

    >>> with NumericsMonitor(model=vae) as mon:      # or .start() / .stop()
    ...     vae.decode(z)
    >>> mon.report.codes()
    ['fp16-overflow']
    """

    def __init__(
        self,
        report: Report | None = None,
        model: nn.Module | None = None,
        every: int = 1,
        underflow_every: int = 100,
        backward: bool = True,
        scaler: bool = True,
        shadow: bool = True,
        auto_step: bool = True,
        accuracy: bool = True,
        accuracy_threshold: float = 0.1,
        ops: bool = True,
        name_of: Callable[[nn.Module], str | None] | None = None,
        origin_of: Callable[[torch.Tensor], Any] | None = None,
        place_of: Callable[[nn.Module], dict[str, Any] | None] | None = None,
        region_of: Callable[[], Any] | None = None,
        aside: Callable[[bool], None] | None = None,
    ) -> None:
        if every < 1 or underflow_every < 1:
            raise ValueError("every and underflow_every must be >= 1")
        self.report = report if report is not None else Report(tool="numerics")
        self.model = model
        self.every = every
        self.underflow_every = underflow_every
        self.backward = backward
        self.shadow = shadow
        self.step_index = 0
        self.tensors_measured = 0  # stats rows computed so far (outputs, inputs, gradients)
        self.internal_error: str | None = None
        self.producers: list = []  # every analysis.Producer found, in order
        self.low_dtypes: set[torch.dtype] = set()  # float16/bfloat16 seen in module outputs and inputs
        self.scaler_monitor = (
            ScalerMonitor(report=self.report, low_dtypes=lambda: self.low_dtypes, origin_of=origin_of)
            if scaler
            else None
        )
        self._place_of = place_of  # a root → the user's name for it and the places of its fixes
        self._root_places: dict[int, dict[str, Any]] = {}  # id(root) → place_of(root), at its 1st call
        self._advisor = advice.Advisor(self.report, self.evidence)
        self._region_of = region_of  # the `with torch.autocast(...)` a module call runs in (file, line, text)
        self._active = False
        self._explicit_steps = not auto_step  # steps end only at step()
        self._handles: list[Any] = []
        self._pre_id = -1  # the global pre-hook's id
        self._kwargs_flags: list[dict] = []  # the adopted modules' `_forward_pre_hooks_with_kwargs`
        self._names: dict[int, str] = {}  # id(module) → qualified name
        # asked once per outermost call (`_begin_root`), read on every module call inside it
        self._accuracy_open = accuracy
        self._low_params = False  # the root has float16/bfloat16 parameters
        self._scans_waiting = False  # op-level scans or float32 re-runs wait for some module's call
        self._params: dict[int, list[nn.Parameter]] = {}  # id(root) → its parameters, listed once
        self._modules: dict[str, nn.Module] = {}
        self._op_owners: list[tuple[Any, nn.Module, str | None]] = []  # op findings to name at stop
        self._unplaced: list[tuple[Any, str, int]] = []  # op findings made outside every module
        self._unplaced_calls = 0
        self._op_modules: list[tuple[Any, nn.Module]] = []  # op findings and the module their op ran in
        self._held: dict[int, list[Any]] = {}  # id(module) → its inf/NaN op findings, judged at its return
        self._consumer_wait: list[tuple[Any, str, int]] = []  # cast-rounding findings: the module to cast at
        self._born_keeps: list[tuple[Any, nn.Module, str]] = []  # op findings a module's own tensor set
        self._roots: list[nn.Module] = []
        self._stack: list[Frame] = []
        self._shadows: dict[str, nn.Module | None] = {}
        self._busy = False
        self._aside = aside
        self._scan_only = False
        self.accuracy = AccuracyCheck(accuracy_threshold) if accuracy else None
        self._root_of: dict[str, tuple[nn.Module, str]] = {}  # path → (root, path in the root)
        self._op_scans: dict[str, Any] = {}  # path → the Finding its op-level scan refines
        self._wrong_findings: dict[str, Any] = {}  # path → its finite-but-wrong Finding
        self._first_traced: Traced | None = None  # the op the last closed trace named
        self._steps_traced = [0, 0]  # calls traced (optrace) of roots with / without parameters
        self._traced_root_kind = 0
        self._traced: dict[str, Traced] = {}  # module path → the op its trace named
        self._name_of = name_of
        self._origin_of = origin_of
        self._opwatch = (
            OpWatch(self._on_op_hit, self._current_module, self._tool_busy, self._op_error) if ops else None
        )
        self._reset_step()

    # -- public API ---------------------------------------------------------------------------
    def start(self) -> NumericsMonitor:
        if self._active:
            return self
        self._active = True
        # global hooks, filtered by the adopted modules: one registration, not two per module
        pre = register_module_forward_pre_hook(self._global_pre)
        self._pre_id = pre.id
        self._handles.append(pre)
        self._handles.append(register_module_forward_hook(self._global_post, always_call=True))
        if self.model is not None:
            self._adopt(self.model, prefix="")
        if self.scaler_monitor is not None:
            self.scaler_monitor.start()
        if self._opwatch is not None:
            self._opwatch.__enter__()
        return self

    def stop(self) -> Report:
        """Remove every hook, analyse what is pending, write the summary findings."""
        if self._opwatch is not None and self._opwatch in _function_modes():  # also after `_fail`
            self._opwatch.__exit__(None, None, None)
        if self._active:
            self._flush()
        if self._opwatch is not None:
            self._opwatch.trace = None
        self._active = False
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        for flags in self._kwargs_flags:
            flags.pop(self._pre_id, None)
        self._kwargs_flags.clear()
        self._shadows.clear()
        if self.scaler_monitor is not None:
            self.scaler_monitor.stop()
        self._advisor.finish(self._modules)
        for path, pending in self._op_scans.items():
            if pending is not None and path in self._traced:  # no second call: the trace tells the op
                located.traced_text(pending, self._traced[path])
        if self.accuracy is not None:
            for wrong in self.accuracy.close():
                if wrong.path in self._traced:
                    located.traced_text(self._wrong_findings[wrong.path], self._traced[wrong.path])
                elif not self._op_inside(self._wrong_findings[wrong.path], wrong.path):
                    located.unscanned(self._wrong_findings[wrong.path])
                    autocast_entry.lowered_ops(  # under autocast: the ops it lowers in that forward
                        self._wrong_findings[wrong.path],
                        self._modules.get(wrong.path),
                        self._advisor.regions.get(wrong.path),
                        wrong.dtype,
                    )
        self._name_op_findings()
        self._names.clear()  # a later start() adopts (and hooks) the roots again
        self._params.clear()
        self._roots.clear()
        if self.internal_error:
            self.report.meta["numerics_internal_error"] = self.internal_error
        return self.report

    def step(self) -> None:
        """Mark a step boundary yourself (e.g. after optimizer.step()); root calls then stop counting."""
        self._explicit_steps = True
        if self._active:
            self._flush()
        self.step_index += 1

    def __enter__(self) -> NumericsMonitor:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def busy(self) -> bool:
        """True while the monitor runs modules itself (float32 re-runs, op-level scans)."""
        return self._busy

    # -- module adoption ----------------------------------------------------------------------
    def _adopt(self, root: nn.Module, prefix: str) -> None:
        self._roots.append(root)
        for name, module in root.named_modules(prefix=prefix, remove_duplicate=True):
            if id(module) in self._names:
                continue
            self._names[id(module)] = name
            self._modules[name] = module
            self._root_of[name] = (root, name[len(prefix) + 1 :] if prefix else name)
            # torch gives a global pre-hook the call's kwargs where the module lists its id among
            # its hooks with kwargs (else `_call_kwargs` reads them from torch's frame, slower)
            flags = module.__dict__.get("_forward_pre_hooks_with_kwargs")
            if flags is not None:
                flags[self._pre_id] = True
                self._kwargs_flags.append(flags)
        if self.backward:
            for name, param in root.named_parameters(prefix=prefix):
                if param.requires_grad and not nn.parameter.is_lazy(param):
                    hook = functools.partial(self._on_param_grad, name, weakref.ref(param))
                    self._handles.append(param.register_hook(hook))

    # the two hooks on every module call; an internal error stops monitoring (`_fail`), never the run
    def _global_pre(self, module: nn.Module, args: tuple, kwargs: dict | None = None) -> None:
        if is_dynamo_compiling():  # dynamo traces the hooks: the compiled graph stays the user's
            return
        path = self._names.get(id(module))
        if path is not None:
            if self._active:
                try:
                    kwargs = _call_kwargs() if kwargs is None else kwargs
                    with own_ops():
                        if self._unplaced or self._consumer_wait:
                            self._place_unplaced(path, args, kwargs)
                        self._pre(module, path, args, kwargs)
                except Exception as exc:
                    self._fail(exc)
        elif self.model is None and self._active:
            try:
                with own_ops():
                    self._adopt_root(module, args, _call_kwargs())
            except Exception as exc:
                self._fail(exc)

    def _global_post(self, module: nn.Module, args: tuple, output: Any) -> None:
        if not is_dynamo_compiling() and self._active and id(module) in self._names:
            try:
                with own_ops():
                    self._post(module, args, output)
            except Exception as exc:
                self._fail(exc)

    def _fail(self, exc: Exception) -> None:  # a hook never breaks the user's run: monitoring stops
        self._active = False
        self.internal_error = f"{type(exc).__name__}: {exc}"

    def _adopt_root(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        if self._busy or self._stack:
            return
        self._adopt(module, self._root_prefix(module))
        self._pre(module, self._names[id(module)], args, kwargs)

    def _root_prefix(self, module: nn.Module) -> str:
        """A module called on its own is named by its path in the model the user built (the caller's
        name for it, `decoder` of `vae.decode`), else the first root "" and later ones their class."""
        named = self._name_of(module) if self._name_of is not None else None
        if named and named != type(module).__name__ and named not in self._modules:
            return named
        if not self._roots or not own_paths_collide(module, self._roots):
            return ""  # named by its own paths, as `run` names it (watching.modules.Names.add_root)
        return type(module).__name__

    # -- step bookkeeping ---------------------------------------------------------------------
    def _reset_step(self) -> None:
        self._rows = Rows()  # measured on device in batches, read back once per step
        self._infos: list[TensorInfo] = []
        self._records: list[Call | Sighting] = []
        self._grads: list[Grad] = []
        self._shadow_runs: list[Shadow] = []
        self._seen = Seen()
        self._consumers: dict[int, list[Call]] = {}
        self._made_by: dict[int, str | None] = {}
        self._token = object()
        self._pending_step: int | None = None
        self._full = True  # this step counts underflow and zeros (set at its first measurement)
        self._low_precision_step = False
        self._after_model_ops: list[Any] = []  # op findings after the model returned (a loss's ops)

    def scan_call(self, call: Callable[[], Any]) -> Any:
        """Run `call` (one more forward) only for the op-level scans waiting for a module call:
        nothing is measured and no step is counted. Not run (None) when no scan is waiting."""
        if self._active:
            self._flush()
        if not self._active or not self.pending_scans():
            return None
        self._scan_only = True
        try:
            return call()
        finally:
            self._scan_only = False

    def _flush(self) -> None:
        self._end_trace()  # still open when stop() or step() ends the step inside a call
        first, self._first_traced = self._first_traced, None
        if not self._rows:
            if first is not None:
                self._opwatch.report_traced(first)  # type: ignore[union-attr]
            self._reset_step()
            return
        with torch._C.DisableTorchFunction():  # the tool's own read: no mode (the op checks') sees it
            values = self._rows.read()
        self.tensors_measured += len(values)
        step = self._pending_step if self._pending_step is not None else self.step_index
        producers = forward_producers(self._records, values, self._infos, step)
        if self.backward:
            back = backward_producer(self._grads, values, self._infos, self._consumers, self._made_by, step)
            if back is not None:
                mark_consequence(producers, back)  # a forward cause leads; backward follows from it
                producers.append(back)
        made: dict[str | None, Any] = {}  # module path → its producer finding, this step
        for producer in producers:
            if producer.module_type is None and producer.path in self._modules:
                producer.module_type = type(self._modules[producer.path]).__name__
            self.producers.append(producer)
            finding = self._advisor.producer(producer, self._modules)
            made.setdefault(producer.path, finding)
            if producer.kind == "loss":
                self._explain_loss(finding)
            path = producer.path
            if path is not None and located.wants_op_scan(producer) and path not in self._op_scans:
                self._op_scans[path] = finding
            if self.shadow and path is not None and producer.phase == "forward" and producer.kind == "module":
                self._shadows.setdefault(path, None)
        self._check_accuracy(values, step)
        if first is not None:
            self._place_traced(first, made)
        for rerun in self._shadow_runs:
            self._advisor.shadow(rerun.path, max(values[s][ABSMAX] for s in rerun.slots))
            self._shadows.pop(rerun.path, None)
        self._advisor.ranges(self._records, self._grads, values, self._infos)
        self._reset_step()

    def _measure(self, tensor: torch.Tensor, signed: bool = False) -> int:
        """A row for `tensor`: its own, or a copy of its base's (no op) where it views all of a
        tensor measured this step (reshape, permute, transpose: the same values)."""
        if self._pending_step is None:
            self._pending_step = self.step_index
            self._full = (self.step_index // self.every) % self.underflow_every == 0
        dtype = tensor.dtype
        if dtype in _LOW:
            self._low_precision_step = True
            self.low_dtypes.add(dtype)
        rows, same = self._rows, self._seen.same_values(tensor)
        if same >= 0:
            slot = rows.alias(same)
        else:
            slot = rows.add(tensor, signed) if self._full else rows.add_range(tensor)
        self._infos.append(TensorInfo(short_dtype_name(dtype), tensor.shape, tensor.numel()))
        self._seen.note(tensor, slot)
        if self.backward and tensor.requires_grad and torch.is_grad_enabled():
            tensor.register_hook(functools.partial(self._on_grad, self._token, slot))
        return slot

    # -- hooks --------------------------------------------------------------------------------
    def _pre(self, module: nn.Module, path: str, args: tuple, kwargs: dict) -> None:
        if self._busy:
            return
        stack = self._stack
        if not stack:
            self._begin_root(module)
        if self._scans_waiting:
            self._scan(path, module, args, kwargs)
        regions = self._advisor.regions
        if self._region_of is not None and path not in regions and torch._C._is_any_autocast_enabled():
            regions[path] = self._region_of()
        if self._scan_only or self.step_index % self.every:
            stack.append(Frame(path, None))
            return
        scope = stack[-1].path if stack else None
        call = Call(path, type(module).__name__, 0, [], [], [], not module._modules, scope)
        low = False
        for name, value in zip(arg_names(len(args)), args, strict=False):
            if type(value) not in LEAVES:  # None, flags, sizes: most keyword arguments
                for tensor in measured_tensors(value):
                    low = self._input(call, name, tensor) or low
        if kwargs:
            for name, value in kwargs.items():
                if type(value) not in LEAVES:
                    for tensor in measured_tensors(value):
                        low = self._input(call, name, tensor) or low
        call.start = len(self._records)
        rng = shadow.rng_state() if self.shadow and path in self._shadows else None
        ref = None
        if self._accuracy_open and (low or self._low_params or torch._C._is_any_autocast_enabled()):
            ref = self._reference(path, module, args, kwargs, low)
        stack.append(Frame(path, call, kwargs, rng, ref))

    def _begin_root(self, root: nn.Module) -> None:
        """An outermost call starts (the previous step is complete): what its calls ask, asked once."""
        if not self._explicit_steps and self._rows:
            self._flush()
        if self._place_of is not None and id(root) not in self._root_places:
            self._root_places[id(root)] = self._place_of(root) or {}
        traced = self._steps_traced
        if self._opwatch is not None and self._opwatch.trace is None and traced != list(TRACED_CALLS):
            kind = 0 if next(root.parameters(), None) is not None else 1  # a model, or a loss module
            if traced[kind] < TRACED_CALLS[kind]:
                self._traced_root_kind = kind
                self._opwatch.trace = OpTrace()  # this call's ops: the first inf/NaN from finite operands
        accuracy = self.accuracy
        self._accuracy_open = accuracy is not None and not accuracy.done
        if self._accuracy_open:  # a float32 model outside autocast: no call to re-run in float32
            params = self._params.get(id(root))
            if params is None:
                params = self._params[id(root)] = list(root.parameters())
            self._low_params = any(p.dtype in _LOW for p in params)
        self._scans_waiting = bool(self._op_scans) or (accuracy is not None and bool(accuracy.wrong))

    def _input(self, call: Call, name: str, tensor: torch.Tensor) -> bool:
        """Note one floating input of `call` (measured when first seen); True when low precision."""
        slot = self._seen.slot(tensor)
        if slot < 0:
            slot = self._measure(tensor, signed=True)
            self._records.append(Sighting(slot, call.caller, call.path, name))
            if self.backward:
                self._made_by[slot] = call.caller
        call.in_slots.append(slot)
        call.in_names.append(name)
        if self.backward:
            self._consumers.setdefault(slot, []).append(call)
        return tensor.dtype in _LOW

    def _post(self, module: nn.Module, args: tuple, output: Any) -> None:
        if self._held and id(module) in self._held:
            self._settle_held(module, output)
        if self._busy or not self._stack:
            return
        frame = self._stack.pop()
        call = frame.call
        if call is not None:
            for tensor in measured_tensors(output):
                slot = self._seen.slot(tensor)
                if slot < 0:
                    slot = self._measure(tensor)
                    if self.backward:  # who made a tensor matters to the backward rule only
                        self._made_by[slot] = call.path
                call.out_slots.append(slot)
            self._records.append(call)
            if frame.ref is not None and self.accuracy is not None:
                self.accuracy.after(frame.path, call.module_type, frame.ref, output, self._add_row)
            if frame.path in self._shadows:
                self._run_shadow(frame.path, module, args, frame.kwargs or {}, frame.rng)
        if not self._stack and not self._scan_only:
            self._end_trace()  # the outermost call returned: its ops' flags are read now
        if not self._stack and not self._explicit_steps and not self._scan_only:
            self.step_index += 1

    # -- finite but wrong: float32 re-run of every low-precision call, op-level scans ------------
    def _add_row(self, row: torch.Tensor) -> int:
        self._infos.append(TensorInfo("float32", (), 0))
        return self._rows.add_row(row)
