"""The meta dry-run back-end of the verifier (verifying/verifier.py): check's fixes, tried.

Each of the first few fixes is applied to a copy of the meta mirror (the factory's own globals in
scope, under `torch.device("meta")`; an --input fix: that input cast) and the dry run is run again,
in strict mode: it stops at the first error left, so a failing fix costs little; it passes when no
error is left. Meta has no values, so the error against float32 cannot be measured: the verdict says
so. The replays run in a forked child, or in-process only for library code (verifying/isolation.py).
"""

from __future__ import annotations

import ast
import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..catalog.family_codes import CHECK_INCOMPLETE
from ..report import Finding, Fix, Report, Severity
from ..verifying import isolation, verifier
from ..verifying.contract import NOT_PYTHON_WHY, has_code, not_verified
from ..verifying.verifier import Outcome
from ..watching.names import loaded_names
from .tree_copy import deepcopy_tree

TRIED = 4
BUDGET_S = 1.0  # the replays' time, at least (see label)
PASSES_WHAT = "the dry run passes with this fix (dtypes only; error vs fp32 not measurable on meta)"
PASSES = f"verified: {PASSES_WHAT}"
DryRun = Callable[[nn.Module, dict, Report, str], None]  # (model, keyword inputs, report, watch mode)


@dataclass
class Meta:
    """The dry-run back-end (verifier.Backend): `name` is the model's variable in the factory,
    `scope` the factory's globals, `kw` the inputs; `spare` the fix whose replay may take the
    mirror itself rather than a copy (the last one: the mirror is not needed after it)."""

    mirror: nn.Module
    name: str
    scope: dict[str, Any]
    dry_run: DryRun
    kw: dict
    spare: Fix | None = None

    def edits(self, fix: Fix) -> list[tuple[str, str]]:
        return [("", fix.snippet)]

    def refuse(self, fix: Fix) -> str | None:
        if fix.language != "python" and getattr(fix, "dd_input", None) is None:
            return NOT_PYTHON_WHY
        return unreplayable(fix, self.name, self.scope)

    def run(self, fix: Fix) -> Outcome:
        cast = getattr(fix, "dd_input", None)
        if cast is not None:  # (input name, dtype): the dry run again with that input in that dtype
            return dry_outcome(self.dry_run, self.mirror, {**self.kw, cast[0]: self.kw[cast[0]].to(cast[1])})
        twin = self.mirror if fix is self.spare else deepcopy_tree(self.mirror)
        ns: dict[str, Any] = {**self.scope, "torch": torch, "nn": nn, self.name: twin}
        try:
            with torch.device("meta"), torch.no_grad():
                exec(compile(fix.snippet, "<fix>", "exec"), ns)
        except Exception as exc:
            return Outcome(raised=f"{type(exc).__name__}: {str(exc)[:120]}")
        model = ns.get(self.name)
        if not isinstance(model, nn.Module):
            return Outcome(failed=f"`{self.name}` is no longer a module after the fix")
        return dry_outcome(self.dry_run, model, self.kw)


def unreplayable(fix: Fix, name: str, scope: dict[str, Any]) -> str | None:
    """Why the fix cannot be replayed, known before anything runs; None when it can be."""
    if getattr(fix, "dd_input", None) is not None:
        return None
    missing = sorted((loaded_names(fix.snippet) or set()) - {name, "torch", "nn", "F"} - set(scope))
    if missing:
        where = ", ".join(f"`{n}`" for n in missing)
        return f"names {where}, which the factory does not have"
    try:
        tree = ast.parse(fix.snippet)
    except SyntaxError:
        return "does not parse"
    if any(isinstance(n, (ast.With, ast.AsyncWith)) for n in ast.walk(tree)):
        return "a context to run the model under: check cannot replay your call"
    return None


def dry_outcome(dry_run: DryRun, model: nn.Module, kw: dict) -> Outcome:
    """Replayed in strict mode, a failing fix fails at its first error; a replay that strict mode
    stopped at a warning (a silent promotion) is run again whole in fix mode, which goes past it."""
    again = _replayed(dry_run, model, kw, "strict")
    if not _left(again) and again.meta.get("raised"):
        again = _replayed(dry_run, model, kw, "fix")
    left = _left(again)
    if left:
        f = left[0]
        where = f" in '{f.location.module}'" if f.location is not None and f.location.module else ""
        return Outcome(failed=f"the dry run with this fix still reports {f.code}{where}")
    return Outcome(unmeasured=PASSES_WHAT)


@contextlib.contextmanager
def _no_nested_verify() -> Iterator[None]:
    """The replayed dry run's own watch session verifies nothing again."""
    from ..watching import verify as live

    state = live._replaying
    old = getattr(state, "on", False)
    state.on = True
    try:
        yield
    finally:
        state.on = old


def _replayed(dry_run: DryRun, model: nn.Module, kw: dict, mode: str) -> Report:
    again = Report(tool="check")
    with _no_nested_verify():
        dry_run(model, kw, again, mode)
    return again


def _left(report: Report) -> list[Finding]:
    """What makes a replay fail: an error, or a dry run that did not complete."""
    return [f for f in report.findings if f.severity == Severity.ERROR or f.code == CHECK_INCOMPLETE]


def label(fixes: list[Fix], meta: Meta, where: str, dry_run_s: float) -> None:
    """Label every fix. The mirror is given away: the last replay applies its fix to it (in a forked
    child: a copy of its own). dry_run_s: how long the check's own dry run took. The first fix
    with code is always replayed; another only while the time spent so far plus one more dry run
    stays within max(BUDGET_S, dry_run_s) (a failing fix fails fast, a passing one costs a whole dry
    run): on a huge model only the first fix is replayed."""
    runnable = [f for f in fixes if meta.refuse(f) != NOT_PYTHON_WHY and has_code(f.snippet)]
    for fix in fixes:
        if not any(fix is f for f in runnable) and not fix.verification:
            v = verifier.verify(fix, meta)  # no code, or not Python: never run
            fix.verified, fix.verification = v.passes, v.text
    trial = _Trial(runnable[:TRIED], meta, where, dry_run_s)
    if isolation.can_fork():
        outcome = isolation.in_child(trial.labels)
        labels = outcome.value or [
            (None, not_verified(outcome.stopped or "").text, f.title) for f in trial.tried
        ]
    elif all(isolation.library_code(m) for m in meta.mirror.modules()):
        with isolation.sealed([meta.mirror]):
            labels = trial.labels()
    else:
        why = f"the model runs code of yours, replayed only in a separate process: {isolation.why_no_fork()}"
        labels = [(None, not_verified(why).text, f.title) for f in trial.tried]
    for fix, (verified, text, title) in zip(trial.tried, labels, strict=True):
        fix.verified, fix.verification, fix.title = verified, text, title
    for fix in runnable[TRIED:]:
        fix.verified, fix.verification = None, not_verified("only the first fixes are").text


class _Trial:
    """The first fixes replayed one after another, within the time budget (label)."""

    def __init__(self, tried: list[Fix], meta: Meta, where: str, dry_run_s: float) -> None:
        self.tried, self.meta, self.where, self.dry_run_s = tried, meta, where, dry_run_s
        meta.spare = tried[-1] if tried else None

    def labels(self) -> list[tuple[bool | None, str, str]]:
        """(verified, verification, title) of each fix tried: plain data, sent back from a child."""
        started = time.perf_counter()
        return [self._one(fix, time.perf_counter() - started) for fix in self.tried]

    def _one(self, fix: Fix, spent: float) -> tuple[bool | None, str, str]:
        if fix is not self.tried[0] and spent + self.dry_run_s > max(BUDGET_S, self.dry_run_s):
            why = self.meta.refuse(fix) or "budget: each replay is a dry run of the whole model"
            return None, not_verified(why).text, fix.title
        v = verifier.verify(fix, self.meta)
        pasted_there = not (getattr(fix, "dd_replaces", False) or hasattr(fix, "dd_input"))
        title = fix.title
        if v.passes and self.where and fix.language == "python" and pasted_there:
            title += f" ({self.where})"
        return v.passes, v.text, title
