"""GradScaler.unscale_ patched for the session: its "unscale FP16 gradients" error becomes a
finding naming the fp16 parameters (the ValueError itself reaches the user unchanged)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..patches import patch_method
from . import findings

Session = Any  # watch.session.Session, not imported: no import circle


def patch_grad_scaler(session: Session) -> Callable[[], None] | None:
    """Patch GradScaler.unscale_; returns the function that undoes it."""
    scaler_cls = getattr(torch.amp, "GradScaler", None)
    if scaler_cls is None:
        return None

    def unscale_(call_next: Any, scaler: Any, optimizer: Any) -> Any:
        try:
            return call_next(scaler, optimizer)
        except ValueError as exc:
            if "unscale FP16 gradients" in str(exc):
                _fp16_gradients(session, exc, optimizer)
            raise

    # reference-counted: sessions exiting out of order never leave the class patched
    return patch_method(scaler_cls, "unscale_", unscale_)


def _fp16_gradients(session: Session, exc: BaseException, optimizer: Any) -> None:
    try:
        from .fp16_grads import fp16_gradient_finding

        finding = fp16_gradient_finding(optimizer, session.names, session.prov, session.root)
        if finding is not None:
            session.report.add(finding)
            exc.add_note(findings.note_text(finding))
    except Exception as err:
        session.internal_error(err)
