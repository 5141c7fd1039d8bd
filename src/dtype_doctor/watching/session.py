"""`watch()`: the session, one watch's state and lifecycle: what it was given (model, mode, report),
the bookkeeping its parts share (names, provenance, module stack, repeats, the root call, the calls
kept for the fixes' replay), the findings it added with their fix contexts and their re-ranking; it
starts and stops the watch. One torch call is `session.judge`'s job (op_judge.OpJudge), a module
call `session.hooks`' (module_hooks.ModuleHooks).

First, do no harm: every piece of the tool's own logic runs under try/except; an
internal error is recorded in the report and the user's program goes on unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from torch import nn

from ..catalog.family_codes import FP16_GRADIENT_UNSCALE, TOOL_INTERNAL_ERROR
from ..errors import DtypeMismatchError
from ..report import Finding, Report
from . import clean_calls, failures, findings, numerics_link, threads, warning_origin
from .births import Births
from .blocks import RepeatedBlocks
from .compiled import CompileNotice
from .failures import hide_own_frames
from .forks import ForkNotice
from .mode import Front, FrontedMode, WatchMode
from .module_hooks import ModuleHooks
from .modules import ModuleStack, Names, roots_of
from .op_judge import OpJudge
from .optimizer_steps import watch_optimizer_steps
from .provenance import Provenance
from .scaler_patch import patch_grad_scaler
from .tagging import Tagger

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
        self.explicit = list(roots_of(model).values())  # the roots the user named
        self.explicit_ids = {id(m) for m in self.explicit}
        self.root: nn.Module | None = self.explicit[0] if self.explicit else None  # of the running call
        self.names = Names(roots_of(model))
        self.prov = Provenance()
        self.every = every  # the numerics monitor's step
        self.active = False  # watching: False before, after, in a forked child, in the tool's own runs
        self.numerics_monitor: Any = None  # watch(numerics=True)'s monitor while it runs
        self.forks: ForkNotice | None = None  # the forks made while it runs
        self.raised: dict[int, Any] = {}  # id(exception) -> the finding of the op that raised it
        self.calls: dict[int, Any] = {}  # id(root) -> its last call, replayed to verify fixes
        self.failed_calls: dict[int, Any] = {}  # id(root) -> its first call that raised a dtype error
        self.fix_contexts: dict[int, findings.FixContext] = {}  # id(finding) -> how its fixes were made
        self.blocks = RepeatedBlocks()  # check's dry run folds repeated blocks as it goes
        self.repeats = clean_calls.Repeats(enabled=mode != "fix")
        self.call_state = self.repeats.state
        self.hooks = ModuleHooks(self)
        self.stack = ModuleStack(
            self.hooks.on_enter,
            self.internal_error,
            self.hooks.on_module_exit,
            gate=threads.ThreadGate(self),
            on_nested=self.hooks.on_nested,
            nested_ids=self.explicit_ids,
        )
        self.tagger = Tagger(self.prov, self.names, self.stack)
        self._births = Births(self.prov, self.names, self.internal_error)
        self.rebound = self._births.rebound  # `param.data = t` (mode.py): a new birth
        self.judge = OpJudge(self)
        self.function_mode: WatchMode = WatchMode(self)  # the TorchFunctionMode (threads.py enters it too)
        self._numerics_on = numerics
        self._compiled: CompileNotice | None = None
        self._unpatch: list[Any] = []

    def hand_first(
        self, fronts: dict[Any, Front], run: Callable[[Any, tuple, dict], Any] | None = None
    ) -> None:
        """Before the session is entered: these functions go to their front first, which runs them
        through the watch, and `run` runs each op the watch judged or tagged (mode.FrontedMode)."""
        self.function_mode = FrontedMode(self, fronts, run)

    # ---- context manager -------------------------------------------------------------------
    def __enter__(self) -> Session:
        if self._numerics_on:
            self.numerics_monitor = numerics_link.start(self)
        threads.entered(self)
        self._compiled = CompileNotice()
        self.forks = ForkNotice(self)
        self.stack.start()
        self._unpatch.append(self.prov.sweep_on_gc())
        self._unpatch.append(self._births.start())  # parameters and buffers born from now on
        self._unpatch.append(warning_origin.redirect())  # torch's C++ warnings stay the user's
        self._unpatch.append(watch_optimizer_steps(self))  # fp16 parameters trained without fp32 masters
        undo = patch_grad_scaler(self)
        if undo is not None:
            self._unpatch.append(undo)
        self.function_mode.__enter__()
        self.active = True
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> Literal[False]:
        self.stop()
        if exc is None and self.mode == "fix":
            root = self.root
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

    def stop(self) -> None:
        if not self.active:
            return
        self.active = False
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
        root = self.root
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
        self.function_mode.__exit__(None, None, None)

    def _restore(self) -> None:
        for undo in reversed(self._unpatch):
            undo()
        self._unpatch.clear()

    def _stop_numerics(self) -> None:
        if self.numerics_monitor is not None:
            self.numerics_monitor.stop()
            self.numerics_monitor = None

    def tool_rerun(self) -> bool:
        """The numerics monitor runs a copy of the user's module itself (a float32 re-run, an op scan):
        what its ops do is not the user's program."""
        monitor = self.numerics_monitor
        return monitor is not None and monitor.busy

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

    def _note_compiled(self) -> None:
        for notice in (self._compiled, self.forks):  # what ran unwatched
            if notice is not None and (finding := notice.finding()) is not None:
                self.report.add(finding)


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
