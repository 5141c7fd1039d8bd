"""The replays of a watch session's fixes when it ends (verifying/verifier.py through the live
back-end, watching/verify.py): run when the block failed or on meta (check's dry run), in a forked
child (labels sent back) or in-process for library code; every fix left unreplayed says why (no call
failed, past the first findings, the program stopped before the replay)."""

from __future__ import annotations

from typing import Any

from ..report import Finding
from ..verifying import isolation
from ..verifying.contract import has_code, label_rest, not_verified
from .verify import Call, _replaying, _same_draws, reference, verify


def replay_at_exit(session: Any, exc: BaseException | None) -> None:
    """What a session's end replays: sys.exit is how a program ends (its failure is replayed as any
    other); on Ctrl-C (or another stop) the user wants out, and the fixes say so."""
    from . import contained, fp32_error

    ended = exc is None or isinstance(exc, SystemExit)
    if not (ended or isinstance(exc, Exception)):
        stopped_before_replay(session, type(exc).__name__)
        return
    if exc is None and fp32_error.wanted():  # run --diff's re-run of the patched copy
        session.report.meta["error_vs_fp32"] = fp32_error.measure(session)
    verify_session(session, failed=not ended or bool(session.failed_calls))
    contained.settle_deliberate(session, failed=exc is not None)


def verify_session(session: Any, failed: bool = True) -> None:
    """Verify the fixes of the error findings of a watch session (the first few causes): when the
    block failed, or on meta (check's dry run), where the replay runs under watch."""
    # check's dry run puts the whole model on meta: its first parameter tells (walking them all
    # cost a quarter of a millisecond per watched block of a small model)
    dry_run = not failed and any(
        getattr(next(c[0].parameters(), None), "is_meta", False) for c in session.calls.values()
    )
    if getattr(_replaying, "on", False) or not (failed or dry_run):
        if not getattr(_replaying, "on", False):
            for f in session.report.findings:
                label_rest(f.fixes, "no call failed: a fix is replayed at the call that raised")
        _forget(session)
        return
    _replaying.on = True
    _replaying.session_type = type(session)  # a meta replay runs under watch (no import of session here)
    _replaying.sizes = {}  # the replays copy the model: its size holds while they run
    try:
        replayed = _verify_apart(session)
        for f in session.report.findings:  # the findings past the first few: said, not left blank
            label_rest(
                f.fixes,
                "only the first findings' fixes are replayed"
                if replayed
                else "no error's call to replay it at: a fix is replayed where an error failed",
            )
    finally:
        _replaying.on = False
        _replaying.sizes = None
        _forget(session)


def stopped_before_replay(session: Any, why: str) -> None:
    """The program was stopped (Ctrl-C, `why`) before the replays: every fix says so."""
    for f in session.report.findings:
        label_rest(f.fixes, f"the program was stopped by {why} before the replay")
    _forget(session)


def _verify_apart(session: Any) -> bool:
    """The replays in a forked child (their labels sent back), else in-process, sealed. Whether
    there was a finding's call to replay."""
    targets = _targets(session)
    if not targets:
        return False
    if not isolation.can_fork():
        _replaying.in_process = True
        modules = [t[1].module for t in targets]
        try:
            with isolation.sealed(modules):
                _verify_targets(targets)
        finally:
            _replaying.in_process = False
        return True
    findings = [t[0] for t in targets]
    before = [list(f.fixes) for f in findings]

    def labels() -> list[list[tuple[int, bool | None, str]]]:
        _verify_targets(targets)
        return [
            [
                (next(i for i, g in enumerate(old) if g is fix), fix.verified, fix.verification)
                for fix in f.fixes
            ]
            for f, old in zip(findings, before, strict=True)
        ]

    outcome = isolation.in_child(labels)
    for f, old, got in zip(findings, before, outcome.value or [None] * len(findings), strict=True):
        if got is None:
            for fix in old:
                code = fix.language == "python" and has_code(fix.snippet)
                fix.verified = None
                fix.verification = not_verified(outcome.stopped or "").text if code else fix.verification
            continue
        for i, verified, text in got:
            old[i].verified, old[i].verification = verified, text
        f.fixes = [old[i] for i, _, _ in got]
    return True


def _forget(session: Any) -> None:
    session.calls.clear()
    session.failed_calls.clear()
    session.fix_contexts.clear()  # no frames or tensors kept past the session


def _targets(session: Any) -> list[tuple[Finding, Call, Any]]:
    """(finding, the call to replay, the context its fixes were made in) for the first error findings."""
    rank = {"error": 0, "warning": 1}
    made = {id(f): session.fix_contexts.get(id(f)) for f in session.report.findings}
    errors = [f for f in session.report.findings if made[id(f)] is not None and made[id(f)].scope is not None]
    errors = sorted((f for f in errors if f.severity.value in rank), key=lambda f: rank[f.severity.value])
    if not any(f.severity.value == "error" for f in errors):
        return []  # nothing failed: no replay to run
    out = []
    for f in errors[:6]:
        context = made[id(f)]
        calls = {**session.calls, **session.failed_calls}  # the call that failed, where one did
        found = calls.get(id(context.root)) if context.root is not None else None
        if found is None and calls:
            found = list(calls.values())[-1]
        if found is None:
            continue
        call = Call(*found)
        scope = context.scope
        if call.module is not context.root and scope is not None:  # entered through a method (vae.decode)
            from .names import call_source, expression_for

            reached = expression_for(call.module, [scope])
            context.root_expr = reached[0] if reached else None
            context.call_src = call_source(scope, call.module)
        out.append((f, call, context))
    return out


def _verify_targets(targets: list[tuple[Finding, Call, Any]]) -> None:
    refs: dict[int, Any] = {}
    _replaying.rng = isolation.generators()
    for f, call, context in targets:
        if id(call.module) not in refs:
            _same_draws()
            refs[id(call.module)] = reference(call)
        verify(f, call, context, refs[id(call.module)])
