"""`watch()`: the context manager that ties mode, module stack, provenance and report together.

First, do no harm: every piece of the tool's own logic runs under try/except; an
internal error is recorded in the report and the user's program goes on unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ..catalog.family_codes import (
    AUTOCAST_HALF_CONFLICT,
    FP16_GRADIENT_UNSCALE,
    SILENT_PROMOTION,
    TOOL_INTERNAL_ERROR,
)
from ..errors import DtypeMismatchError
from ..report import Finding, Report
from ..signatures import argument_names
from . import call_memo, clean_calls, contained, failures, findings, numerics_link, threads, warning_origin
from .births import Births
from .blocks import RepeatedBlocks
from .compiled import CompileNotice
from .contracts import LOW_DTYPES, Contract, Mismatch, Scene, Slot, bind, judge, put
from .failures import hide_own_frames
from .forks import ForkNotice
from .mode import CAST, Front, FrontedMode, Generic, WatchMode
from .modules import ModuleStack, Names, roots_of
from .optimizer_steps import watch_optimizer_steps
from .provenance import USER, Provenance, Tag, caller_frames, frame_kind, qualified_op_name
from .scaler_patch import patch_grad_scaler
from .tagging import Tagger
from .tagging import autocast_dtype as _autocast_dtype

_no_torch_function = torch._C.DisableTorchFunction
_any_autocast = getattr(torch._C, "_is_any_autocast_enabled", lambda: True)

MODES = ("observe", "strict", "fix")
__all__ = ["MODES", "Session", "hide_own_frames", "watch"]


class Session:
    """What `watch()` returns; `report` holds the findings."""

    def __init__(
        self,
        model: Any = None,
        mode: str = "observe",
        numerics: bool = False,
        report: Report | None = None,
        every: int = 1,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"watch(mode={mode!r}): expected one of {', '.join(MODES)}")
        self.mode = mode
        self.model = model
        self.report = report if report is not None else Report(tool="watch")
        self.report.meta.setdefault("mode", mode)
        self._explicit = list(roots_of(model).values())
        self.names = Names(roots_of(model))
        self.prov = Provenance()
        self._explicit_ids = {id(m) for m in self._explicit}
        self.stack = ModuleStack(
            self.on_enter,
            self.internal_error,
            self.on_module_exit,
            gate=threads.ThreadGate(self),
            on_nested=self.on_nested,
            nested_ids=self._explicit_ids,
        )
        self._tagger = Tagger(self.prov, self.names, self.stack)
        self._births = Births(self.prov, self.names, self.internal_error)
        self.rebound = self._births.rebound  # `param.data = t` (mode.py): a new birth
        self.repeats = clean_calls.Repeats(enabled=mode != "fix")
        self.call_state = self.repeats.state
        self._scene = Scene(_autocast_dtype, self.stack.param_dtype, self._in_user_code)
        self._mode = WatchMode(self)
        self._seen: dict[tuple, Any] = {}
        self.blocks = RepeatedBlocks()  # check's dry run folds repeated blocks as it goes
        self._ac_reported: set[tuple] = set()
        self._failed: dict[int, Any] = {}  # id(exception) -> the finding of the op that raised it
        self._root: nn.Module | None = self._explicit[0] if self._explicit else None
        self._numerics_on = numerics
        self._numerics: Any = None
        self._every = every
        self._unpatch: list[Any] = []
        self._active = False
        self.calls: dict[int, Any] = {}  # id(root) -> its last call, replayed to verify fixes
        self.failed_calls: dict[int, Any] = {}  # id(root) -> its first call that raised a dtype error
        self.fix_contexts: dict[int, findings.FixContext] = {}  # id(finding) -> how its fixes were made

    def hand_first(
        self, fronts: dict[Any, Front], run: Callable[[Any, tuple, dict], Any] | None = None
    ) -> None:
        """Before the session is entered: these functions go to their front first, which runs them
        through the watch, and `run` runs each op the watch judged or tagged (mode.FrontedMode)."""
        self._mode = FrontedMode(self, fronts, run)

    # ---- context manager -------------------------------------------------------------------
    def __enter__(self) -> Session:
        if self._numerics_on:
            self._start_numerics()
        threads.entered(self)
        self._compiled = CompileNotice()
        self._forks = ForkNotice(self)
        self.stack.start()
        self._unpatch.append(self.prov.sweep_on_gc())
        self._unpatch.append(self._births.start())  # parameters and buffers born from now on
        self._unpatch.append(warning_origin.redirect())  # torch's C++ warnings stay the user's
        self._unpatch.append(watch_optimizer_steps(self))  # fp16 parameters trained without fp32 masters
        undo = patch_grad_scaler(self)
        if undo is not None:
            self._unpatch.append(undo)
        self._mode.__enter__()
        self._active = True
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        self.stop()
        if exc is None and self.mode == "fix":
            root = self._root
            meta = root is not None and any(p.is_meta for p in root.parameters())
            done = "the dry run on meta completed (dtypes only)" if meta else "the block completed"
            for f in self.report.findings:
                if f.data.get("action"):  # the cast was applied and the run completed: say so
                    f.data["verified"] = f"runs: fix mode applied '{f.data['action']}' and {done}"
        try:
            from .session_replay import replay_at_exit

            replay_at_exit(self, exc)
        except Exception as err:
            self.internal_error(err)
        if isinstance(exc, DtypeMismatchError):
            self.report.meta["raised"] = type(exc).__name__
        elif isinstance(exc, Exception):
            try:
                failures.on_exit(self, exc)
                hide_own_frames(exc)
            except Exception as err:
                self.internal_error(err)
        return False

    def tag(self, func: Any, kind: Any, inputs: Any, out: Any) -> None:
        """Give each new floating output the origin of its dtype (tagging.Tagger)."""
        self._tagger.tag(func, kind, inputs, out)

    def tag_copy(self, src: Any, out: torch.Tensor) -> None:
        try:
            self._tagger.tag_copy(src, out)
        except Exception as exc:
            self.internal_error(exc)

    def stop(self) -> None:
        if not self._active:
            return
        self._active = False
        threads.exited(self)
        steps = (self._mode_exit, self.stack.stop, self._restore, self._stop_numerics, self._rerank)
        for step in (*steps, self._note_compiled):
            try:
                step()
            except Exception as exc:
                self.internal_error(exc)

    def _rerank(self) -> None:
        """Several different mismatches in one run: one dtype policy beats patching each op."""
        from .. import catalog

        errors = [f for f in self.report.errors if f.code != FP16_GRADIENT_UNSCALE]
        if len({(f.code, f.location.module if f.location else None) for f in errors}) < 2:
            return
        for f in errors:
            fix_context = self.fix_contexts.get(id(f))
            if fix_context is not None:
                context = {*f.data.get("context", ()), "multi-error"}
                f.data["context"] = sorted(context)
                f.fixes = findings.refine(
                    catalog.fixes_for(f.code, context, **fix_context.names), fix_context
                )

    def keep_failing_call(self) -> None:
        """Keep the running root call that raised a dtype error: its fixes are replayed at the end."""
        root = self._root
        if root is not None and id(root) in self.calls:
            self.failed_calls.setdefault(id(root), self.calls[id(root)])

    def add_finding(self, finding: Finding, fix_context: findings.FixContext) -> Finding:
        """Add a watched finding to the report (folded into an identical one, see Repeats.add); its
        fix context is kept beside it while the session runs, for `_rerank` and the fixes' replay."""
        kept, taken = self.repeats.add(self.report, finding)
        if taken:
            self.fix_contexts[id(kept)] = fix_context
        return kept

    def _mode_exit(self) -> None:
        self._mode.__exit__(None, None, None)

    def _restore(self) -> None:
        for undo in reversed(self._unpatch):
            undo()
        self._unpatch.clear()

    def _start_numerics(self) -> None:
        self._numerics = numerics_link.start(self)

    def _stop_numerics(self) -> None:
        if self._numerics is not None:
            self._numerics.stop()
            self._numerics = None

    # ---- the tool's own failures -------------------------------------------------------------
    def internal_error(self, exc: BaseException) -> None:
        self.repeats.found()
        try:
            errors = self.report.meta.setdefault("internal_errors", [])
            if len(errors) < 20:
                errors.append(f"{type(exc).__name__}: {exc}")
            if len(errors) == 1:
                from .. import catalog
                from ..report import Evidence

                self.report.add(
                    catalog.finding(
                        TOOL_INTERNAL_ERROR,
                        message=f"internal error: {type(exc).__name__}: {exc}",
                        evidence=[Evidence(text=f"{type(exc).__name__}: {exc}", source="dtype-doctor")],
                    )
                )
        except Exception:
            pass  # never let the error path itself fail the user's program

    # ---- module calls ----------------------------------------------------------------------
    def on_enter(self, module: nn.Module, args: tuple, kwargs: dict | None, is_root: bool) -> None:
        explicit = any(module is r for r in self._explicit)
        if is_root and not explicit:
            # entered through a method other than forward (vae.decode(z) → post_quant_conv):
            # the method's owner is the root and its arguments are the model inputs
            entry = findings.entry_call(4)
            if entry is not None and entry[0] is not module:
                owner, method, arguments = entry
                self._root = owner
                if not self._explicit:
                    self.names.add_root(owner)
                self._tagger.tag_inputs(owner, f"{type(owner).__name__}.{method}", list(arguments.items()))
                self._begin_root(module, owner, method, (), arguments)
                self._check_autocast_params(module)
                return
        if is_root:
            self._root = module
            self._begin_root(module, module, "__call__", args, dict(kwargs or {}))
            if not self._explicit:
                self.names.add_root(module)
        if is_root or explicit:
            names = argument_names(module) or []
            items = [(names[i] if i < len(names) else f"args[{i}]", v) for i, v in enumerate(args)]
            items += list((kwargs or {}).items())
            self._tagger.tag_inputs(module, f"{type(module).__name__}.forward", items)
        self._check_autocast_params(module)

    def _begin_root(
        self, module: nn.Module, owner: nn.Module, method: str, args: tuple, kwargs: dict
    ) -> None:
        """A root call begins (`owner.method(...)`, entered through `module`): kept for the replays,
        whole-model answers kept while it runs (call_memo), and is it a repeat of a clean call?"""
        autocast = _autocast_now()
        self.calls[id(module)] = (owner, method, args, kwargs, autocast)
        call_memo.begin()
        self.repeats.begin(owner, args, kwargs, autocast, len(self.report.findings))

    def on_nested(self, module: nn.Module, args: tuple) -> None:
        """A module call inside another (runs for every module: nothing to do unless autocast is on)."""
        if id(module) in self._explicit_ids:
            with _no_torch_function():
                self.on_enter(module, args, None, False)
        elif _any_autocast():
            with _no_torch_function():
                self._check_autocast_params(module)

    def _check_autocast_params(self, module: nn.Module) -> None:
        """A half model under autocast of the other half dtype: report before a norm or cat fails."""
        for dev in ("cpu", "cuda"):
            autocast_to = _autocast_dtype(dev)
            if autocast_to is None or autocast_to not in LOW_DTYPES:
                continue
            for pname, p in module._parameters.items():
                if p is None or p.dtype not in LOW_DTYPES or p.dtype == autocast_to or p.device.type != dev:
                    continue
                key = (dev, autocast_to, p.dtype)
                if key in self._ac_reported:
                    return
                self._ac_reported.add(key)
                finding, fix_context = findings.build(
                    AUTOCAST_HALF_CONFLICT,
                    f"torch.autocast('{dev}', dtype={autocast_to})",
                    [findings.Seen("weight", p, odd=True)],
                    expected=autocast_to,
                    names=self.names,
                    prov=self.prov,
                    module=module,
                    root=self._root,
                    context={"autocast", "module-params"},
                    message=(
                        f"module '{self.names.module(module) or '<root>'}' ({type(module).__name__}) has "
                        f"{str(p.dtype)[6:]} parameter '{pname}' but runs under torch.autocast('{dev}', "
                        f"dtype={autocast_to}): two precision managers disagree; norms and cat will fail"
                    ),
                    depth=4,
                )
                self.add_finding(finding, fix_context)
                if self.mode == "strict":
                    raise DtypeMismatchError(findings.note_text(finding), finding)
                return

    # ---- ops with a contract -----------------------------------------------------------------
    def check_contract(self, func: Any, c: Contract, args: tuple, kwargs: dict) -> tuple:
        slots = bind(c, args, kwargs)
        inputs = [s.tensor for s in slots if s.tensor.is_floating_point()]
        m = judge(c, slots, self._scene)
        if m is None:
            return args, kwargs, inputs, None
        finding = self._report(c.op, slots, m, m.context)
        if self.mode == "strict":
            raise DtypeMismatchError(findings.note_text(finding), finding)
        if self.mode == "fix":
            args, kwargs = self._cast(args, kwargs, m, finding)
            inputs = [s.tensor for s in bind(c, args, kwargs) if s.tensor.is_floating_point()]
        return args, kwargs, inputs, finding

    def _tool_rerun(self) -> bool:
        """The numerics monitor runs a copy of the user's module itself (a float32 re-run, an op scan):
        what its ops do is not the user's program."""
        numerics = self._numerics
        return numerics is not None and numerics.busy

    def _in_user_code(self) -> bool:
        inner, _ = caller_frames(3)
        if inner is not None and frame_kind(inner[0]) == USER:
            return True
        self.report.meta["library_promotions"] = self.report.meta.get("library_promotions", 0) + 1
        return False

    def _report(self, op: str, slots: list[Slot], m: Mismatch, context: set[str]) -> Any:
        module = self.stack.top
        path = self.names.module(module)
        what = (op, m.code, tuple((s.role, s.tensor.dtype) for s in slots))
        key = (path, *what)
        known = self._seen.get(key) or self.blocks.met(what, path)
        if known is not None and not self.repeats.rebuild(known):
            self.repeats.found()
            known.count += 1
            return known
        if self.mode == "fix":
            context.add("fix-mode")
        odd = {id(s) for s in m.odd}
        finding, fix_context = findings.build(
            m.code,
            op,
            [findings.Seen(s.role, s.tensor, odd=id(s) in odd) for s in slots],
            expected=m.expected,
            names=self.names,
            prov=self.prov,
            module=module,
            root=self.stack.stack[0] if self.stack.stack else self._root,
            context=context,
            depth=4,
        )
        if self.mode == "fix":
            acts = [f"cast {s.role} {str(s.tensor.dtype)[6:]} -> {str(m.expected)[6:]}" for s in m.odd]
            finding.data["action"] = "; ".join(acts)
            finding.message += " (fix mode: " + "; ".join(acts) + ")"
        finding = self.add_finding(finding, fix_context)
        self._seen[key] = finding
        self.blocks.first(what, path, finding)
        return finding

    def _cast(self, args: tuple, kwargs: dict, m: Mismatch, finding: Any) -> tuple[tuple, dict]:
        module = self.stack.top
        for s in m.odd:
            new = s.tensor.to(m.expected)
            prev = self.prov.lookup(s.tensor)
            inner, user = caller_frames(4)
            self.prov.set(
                new,
                Tag(
                    "cast", new.dtype, "dtype-doctor fix", None, module, inner, user, (prev,) if prev else ()
                ),
            )
            args, kwargs = put(args, kwargs, s.where, new)
        return args, kwargs

    # ---- every other op: silent promotion ---------------------------------------------------
    def scan(self, func: Any, kind: Any, args: tuple, kwargs: dict) -> tuple:
        if kind is CAST:
            return args, kwargs, [a for a in args[:1] if isinstance(a, torch.Tensor)], None
        floats: list[torch.Tensor] = []
        for a in args:
            if isinstance(a, torch.Tensor):
                if a.is_floating_point():
                    floats.append(a)
            elif type(a) is list or type(a) is tuple:
                floats.extend(x for x in a if isinstance(x, torch.Tensor) and x.is_floating_point())
        if kwargs:
            floats.extend(v for v in kwargs.values() if isinstance(v, torch.Tensor) and v.is_floating_point())
        if len(floats) < 2 or not kind.promotes:
            return args, kwargs, floats, None
        d0 = floats[0].dtype
        if all(f.dtype == d0 for f in floats):
            return args, kwargs, floats, None
        return self._promotion(func, kind, args, kwargs, floats)

    def _promotion(self, func: Any, kind: Generic, args: tuple, kwargs: dict, floats: list) -> tuple:
        wide = [f for f in floats if f.dim() > 0]  # 0-dim tensors do not promote
        dtypes = {f.dtype for f in wide}
        if len(dtypes) < 2 or not dtypes & set(LOW_DTYPES):
            return args, kwargs, floats, None
        autocast_to = _autocast_dtype(wide[0].device.type)
        if autocast_to is not None and dtypes <= {torch.float32, autocast_to}:
            return args, kwargs, floats, None  # what autocast does on purpose
        if self._tool_rerun() or not self._in_user_code():
            return args, kwargs, floats, None
        slots: list[Slot] = []
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor) and a.is_floating_point():
                slots.append(Slot(f"operand{i}", a, ("a", i)))
        for k, v in kwargs.items():
            if isinstance(v, torch.Tensor) and v.is_floating_point():
                slots.append(Slot(k, v, ("k", k)))
        slots = [s for s in slots if s.tensor.dim() > 0]
        if not slots:
            return args, kwargs, floats, None
        context_dt = self.stack.param_dtype()
        low = [s.tensor.dtype for s in slots if s.tensor.dtype in LOW_DTYPES]
        expected = context_dt if context_dt in {s.tensor.dtype for s in slots} else low[0]
        m = Mismatch(expected, [s for s in slots if s.tensor.dtype != expected], SILENT_PROMOTION)
        finding = self._report(qualified_op_name(func), slots, m, {"promotion"})
        contained.judge(self, finding, [s.tensor for s in slots])
        if self.mode == "strict":
            raise DtypeMismatchError(findings.note_text(finding), finding)
        if self.mode == "fix":
            args, kwargs = self._cast(args, kwargs, m, finding)
            floats = [f.to(expected) if f.dim() > 0 else f for f in floats]
        return args, kwargs, floats, finding

    # ---- when the op itself raises -----------------------------------------------------------
    def on_failure(
        self, exc: BaseException, func: Any, kind: Any, args: tuple, kwargs: dict, finding: Any
    ) -> None:
        self.repeats.found()
        if self._tool_rerun():
            return  # the numerics monitor's own float32 re-run failed: not the user's program
        try:
            failures.on_failure(self, exc, func, kind, args, kwargs, finding)
        except Exception as err:
            self.internal_error(err)

    def _note_compiled(self) -> None:
        for finding in (self._compiled.finding(), self._forks.finding()):  # what ran unwatched
            if finding is not None:
                self.report.add(finding)

    def on_module_exit(self, module: nn.Module, args: tuple, output: Any) -> None:
        """An outermost module call returned: its outputs are "output of <Class> at file:line"; the
        tags of the call's dead intermediates go (a table of one step's tags, not a sawtooth)."""
        if self._active:
            self.repeats.end(output is not None, len(self.report.findings))
            call_memo.end()
            self._tagger.tag_module_output(module, args, output)
            self.prov.sweep()


def _autocast_now() -> tuple:
    """The autocast in force at a call, (device, dtype) pairs: a replay of the call runs under it."""
    return tuple((d, _autocast_dtype(d)) for d in ("cpu", "cuda") if _autocast_dtype(d) is not None)


def watch(
    model: Any = None,
    mode: str = "observe",
    numerics: bool = False,
    report: Report | None = None,
    every: int = 1,
) -> Session:
    """Watch every torch op run inside the `with` block for dtype mismatches.

    model: the root module (or a pipeline) for qualified names; by default the first module
    called becomes the root. mode: "observe" (changes nothing), "strict" (raise
    DtypeMismatchError at the first mismatch, silent promotions included) or "fix" (cast the
    odd operand, record it, go on; works on meta tensors). numerics=True also starts the
    numerics monitor. The findings are in `session.report`.
    """
    return Session(model=model, mode=mode, numerics=numerics, report=report, every=every)
