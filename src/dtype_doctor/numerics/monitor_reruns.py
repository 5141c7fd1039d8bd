"""NumericsMonitor's re-runs (a mixin: it shares the monitor's state): the float32 re-run of every
low-precision call (finite but wrong), the op-level scans at a module's next call, and the float32
re-run of a producer (range or precision)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from . import located, shadow
from .accuracy import low_call
from .analysis import Call, Shadow
from .opscan import scan_ops
from .stats import measured_tensors


class ReRuns:
    """The monitor's own runs of the user's modules; `_busy` is set while they run."""

    accuracy: Any
    report: Any
    _busy: bool
    _aside: Any

    @contextlib.contextmanager
    def _own_run(self) -> Iterator[None]:
        """The monitor runs the user's modules itself: `_busy` while it does, and the watch beside
        it (`aside`) stepped aside, so nothing of this run is taken for the user's program."""
        self._busy = True
        if self._aside is not None:
            self._aside(True)
        try:
            with torch._C._EnableTorchFunction():  # the hooks measure with it off: a scan's mode must see
                yield
        finally:
            self._busy = False
            if self._aside is not None:
                self._aside(False)

    def evidence(self, path: str | None) -> dict[str, Any]:
        """For the findings' remedies: the user's name for the root holding `path` (`model`), the
        places of its fixes (`places`), and the path in that root (`in_root`: a second root's is
        prefixed by its class)."""
        root = self._root_of.get(path or "")
        return {**self._root_places.get(id(root[0]), {}), "in_root": root[1]} if root else {}

    def _reference(self, path: str, module: nn.Module, args: tuple, kwargs: dict, low: bool) -> list | None:
        if self.accuracy is None or not low_call(module, args, kwargs, low):
            return None
        root, rel = self._root_of.get(path, (None, ""))
        if root is None:
            return None
        with self._own_run():
            return self.accuracy.before(root, rel, module, args, kwargs, {id(self): self}, low=True)

    def _check_accuracy(self, values: list[list[float]], step: int) -> None:
        if self.accuracy is None or not self.accuracy.pending:
            return
        dtypes = {
            r.path: self._infos[r.out_slots[0]].dtype
            for r in self._records
            if isinstance(r, Call) and r.out_slots
        }
        for wrong in self.accuracy.flush(values, dtypes, step):
            finding = located.wrong_finding(wrong, self.accuracy.threshold, self.evidence(wrong.path))
            self.report.add(finding)
            self._op_scans.pop(wrong.path, None)
            self._wrong_findings[wrong.path] = finding

    def _scan(self, path: str, module: nn.Module, args: tuple, kwargs: dict) -> None:
        """The op-level scans waiting for this module's call (one each, then never again)."""
        try:  # a scan that fails costs its finding the op, never the monitoring
            with self._own_run():
                self._scans(path, module, args, kwargs)
        except Exception as exc:
            self.report.meta.setdefault("numerics_scan_errors", []).append(f"{type(exc).__name__}: {exc}")

    def _scans(self, path: str, module: nn.Module, args: tuple, kwargs: dict) -> None:
        finding = self._op_scans.get(path)
        if finding is not None:
            self._op_scans[path] = None
            hit = scan_ops(module, args, kwargs)
            if hit is not None:
                located.located(finding, hit)
        if self.accuracy is not None and self.accuracy.wants_scan(path):
            root, rel = self._root_of[path]
            wrong = self.accuracy.scan(path, root, rel, module, args, kwargs, memo={id(self): self})
            located.scanned(self._wrong_findings[path], wrong, self.evidence(path))

    def pending_scans(self) -> bool:
        """Op-level scans that wait for another call of their module."""
        waiting = any(v is not None for v in self._op_scans.values())
        return waiting or (
            self.accuracy is not None and any(not w.scanned for w in self.accuracy.wrong.values())
        )

    def _run_shadow(
        self, path: str, module: nn.Module, args: tuple, kwargs: dict, rng: tuple | None = None
    ) -> None:
        """Run a copy of the producer in float32 on the same inputs: how big is the true value?"""
        with self._own_run():
            twin = self._shadows.get(path)
            if twin is None:
                twin = shadow.twin(module, {id(self): self})
                if twin is None:
                    self._shadows.pop(path, None)
                    return
                self._shadows[path] = twin
            slots = [self._measure(t) for t in measured_tensors(shadow.run(twin, args, kwargs, rng))]
        if slots:
            self._shadow_runs.append(Shadow(path, slots))
