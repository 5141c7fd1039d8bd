"""NumericsMonitor's op-level side (a mixin: it shares the monitor's state): the trace of the first
low-precision calls (`optrace`), where the op it names goes, and the op checks' hits (`opwatch`)
named as the caller names modules."""

from __future__ import annotations

import os
from typing import Any

import torch

from . import born_keep, consumer_cast, located, loss_cause
from .opfindings import op_finding
from .optrace import Traced
from .opwatch import Hit
from .owner import late_name
from .stats import measured_tensors

_PLACE_CALLS = 512  # module calls an unplaced op finding waits for its consumer


def _passes(origin: Any, file: str, line: int, depth: int = 0) -> bool:
    """Does the origin, or one in its chain, name `file`:`line`?"""
    if origin.line == line and origin.file and os.path.basename(origin.file) == file:
        return True
    return depth < 8 and any(_passes(c, file, line, depth + 1) for c in origin.chain)


def _computed_from(origin: Any, file: str, line: int) -> bool:
    """Made from what `file`:`line` made, by at least one op after it (not that tensor itself)."""
    if origin is None or (origin.line == line and os.path.basename(origin.file or "") == file):
        return False
    return _passes(origin, file, line)


class OpTraces:
    """Hooks the monitor hands to its OpWatch, and the trace's placement."""

    report: Any
    _op_owners: list[tuple[Any, Any, str | None]]
    _unplaced: list[tuple[Any, str, int]]
    _unplaced_calls: int
    _origin_of: Any
    _modules: dict[str, Any]
    _name_of: Any
    _stack: list[Any]
    _records: list[Any]
    _after_model_ops: list[Any]
    _born_keeps: list[tuple[Any, Any, str]]
    _consumer_wait: list[tuple[Any, str, int]]
    _op_modules: list[tuple[Any, Any]]
    _held: dict[int, list[Any]]
    _roots: list[Any]

    def _end_trace(self) -> None:
        """Close the op trace of the outermost call that returned (one read of its flags); the
        op it names is placed at the step's analysis (`_flush`)."""
        trace = self._opwatch.trace if self._opwatch is not None else None
        if trace is None:
            return
        # a call with low-precision ops inside a forward counts (not only a cast between them);
        # a root without parameters (a loss module called after the model) counts apart
        if any(op.module is not None for op in trace.ops):
            self._steps_traced[self._traced_root_kind] += 1
        first = self._opwatch.end_trace()  # type: ignore[union-attr]
        if first is not None and self._first_traced is None:
            self._first_traced = first

    def _place_traced(self, first: Traced, made: dict[str | None, Any]) -> None:
        """The op the trace found: it locates the finding of its module (a producer whose op its
        type does not name, or a finite-but-wrong module) where there is one; a module producer
        that names its op already needs nothing; otherwise it is an op-level finding of its own."""
        path = first.module
        finding = self._op_scans.get(path) if path is not None else None  # type: ignore[arg-type]
        if finding is None and path is not None:
            finding = self._wrong_findings.get(path)
        if finding is not None:
            located.traced(finding, first)
            self._traced[path] = first  # type: ignore[index]
        elif path not in made:
            self._opwatch.report_traced(first)  # type: ignore[union-attr]

    def _current_module(self) -> str | None:
        return self._stack[-1].path if self._stack else None

    def _tool_busy(self) -> bool:
        return self._busy or self._scan_only or not self._active

    def _op_error(self, exc: Exception) -> None:
        self.report.meta.setdefault("numerics_op_errors", []).append(f"{type(exc).__name__}: {exc}")

    def _on_op_hit(self, hit: Hit) -> None:
        finding = op_finding(hit, self.module_name, self._origin_of)
        self.report.add(finding)
        owner = hit.owner if hit.owner is not None else self._modules.get(hit.module or "")
        if owner is not None:
            self._op_modules.append((finding, owner))
            if hit.problem.kind == "overflow":  # judged when its module returns (`_settle_held`)
                self._held.setdefault(id(owner), []).append(finding)
        if hit.module is None and not self._stack and self._records:  # after the model, as a loss is
            self._after_model_ops.append(finding)
        if hit.problem.kind == "positions" and hit.operands:  # the dtype a module's own tensor set
            tensor = born_keep.owned(owner, hit.operands[0])
            if tensor is not None:
                self._born_keeps.append((finding, owner, tensor))
        if hit.owner is not None:
            self._op_owners.append((finding, hit.owner, hit.built_as))
        elif finding.location is not None and finding.location.module is None and hit.file and hit.line:
            # made outside every module (a timestep rounded in the script): the module whose input
            # descends from it is where the value does its harm
            self._unplaced.append((finding, os.path.basename(hit.file), hit.line))

    def _settle_held(self, module: Any, output: Any) -> None:
        """`module` returned: an inf/NaN made inside it that none of its outputs carries (a mask's
        -inf added to another, a router's scatter of -inf before a top-k) did the user no harm, so
        its finding is withdrawn; one that reaches the outputs stays."""
        held = self._held.pop(id(module), [])
        outputs = [t for t in measured_tensors(output) if t.is_floating_point()]
        if held and outputs and all(bool(torch.isfinite(t).all()) for t in outputs):
            for finding in held:
                if finding in self.report.findings:
                    self.report.findings.remove(finding)

    def _op_inside(self, finding: Any, path: str) -> bool:
        """A wrong module whose op was not located: an op-level finding inside it is its cause."""
        try:
            cause = loss_cause.inside(self._modules.get(path), self._op_modules)
            if cause is not None:
                loss_cause.wrong_module(finding, cause)
        except Exception as exc:
            self._op_error(exc)
            return False
        return cause is not None

    def _explain_loss(self, finding: Any) -> None:
        """A gradient arriving non-finite from the loss: an op of this step after the model that
        makes inf in its dtype is its cause (`loss_cause`)."""
        cause = loss_cause.cause_of(self._after_model_ops)
        if cause is not None and not finding.data.get("consequence_of"):  # a forward overflow leads
            loss_cause.explain(finding, cause)

    def _place_unplaced(self, path: str, args: tuple, kwargs: dict | None) -> None:
        """A module is called: an unplaced op finding whose result this call's input descends from
        (its origin chain passes the op's line) is located in it (the first such module but the
        root the user called, whose name says nothing)."""
        self._unplaced_calls += 1
        if self._unplaced_calls > _PLACE_CALLS or self._origin_of is None:
            self._unplaced.clear()
            self._consumer_wait.clear()
            return
        name = self.module_name(path)
        if not name:
            return
        values = [*args, *(kwargs or {}).values()]
        origins = [self._origin_of(t) for t in values[:8] if isinstance(t, torch.Tensor)]
        for entry in list(self._unplaced):
            finding, file, line = entry
            if any(o is not None and _passes(o, file, line) for o in origins):
                finding.location.module = name
                finding.location.module_type = type(self._modules[path]).__name__
                self._unplaced.remove(entry)
                if finding.data.get("kind") == "cast-rounding":  # a low module reading it is cast
                    self._consumer_wait.append(entry)
        for entry in list(self._consumer_wait):
            if self._cast_at_consumer(*entry, path, args):
                self._consumer_wait.remove(entry)

    def _cast_at_consumer(self, finding: Any, file: str, line: int, path: str, args: tuple) -> bool:
        """A cast that rounds, dropped, and the input of this module (with low-precision weights, its
        input computed from the value) cast where the user's code calls it (`consumer_cast`)."""
        module = self._modules[path]
        if consumer_cast.low_dtype(module) is None:
            return False
        index = consumer_cast.tensor_index(args, lambda t: _computed_from(self._origin_of(t), file, line))
        if index is None:
            return False
        try:  # a fix that cannot be written costs the finding that fix, never the monitoring
            consumer_cast.prepend(
                finding, module, self.module_name(path) or path, path.rpartition(".")[2], index
            )
        except Exception as exc:
            self._op_error(exc)
        return True

    def _name_op_findings(self) -> None:
        """Name each op-level finding's module as the run ends: a module called on its own before
        its model was is named by its path in that model; one built with no forward around it by
        the constructors that built it."""
        for finding, module, built_as in self._op_owners:
            loc = finding.location
            name = late_name(module, built_as, self._name_of, loc.module)
            if loc is not None and name and name != loc.module:
                loc.module = name
                loc.module_type = type(module).__name__
        self._op_owners.clear()
        for finding, module, tensor in self._born_keeps:  # named now: the module's path is known
            try:
                born_keep.prepend_keep(finding, module, tensor, self._roots)
            except Exception as exc:
                self._op_error(exc)
        self._born_keeps.clear()
        self._op_modules.clear()

    def module_name(self, path: str | None) -> str | None:
        """The module at `path` as the caller names it (`run`'s names), else the path."""
        if path is None:
            return None
        module = self._modules.get(path)
        if self._name_of is not None and module is not None:
            try:
                name = self._name_of(module)
            except Exception:
                return path
            return path if name is None else name  # "": the root the user called
        return path
