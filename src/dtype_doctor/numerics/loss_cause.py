"""A non-finite gradient arriving at the model's output from the loss, explained by an op of the loss;
a module's wrong output, explained by an op-level finding inside it.

The monitor sees the gradient reach the model output already inf/NaN (a `loss` producer). When, in
the same step, an op the user's code ran after the model's forward was found to make inf in its
dtype (a clamp bound that rounds to the edge, an eps that is 0, a constant or a result beyond the
range), that op's backward made the gradient: the op's finding is the cause (its fix first), and
the gradient finding follows from it. Loss scaling cannot help there: a scaled inf or NaN stays one.
"""

from __future__ import annotations

from ..report import Finding, Severity
from .frames import where

# op-level kinds (numerics/opchecks) whose op gives inf in forward or backward (log1p(-1), 1/0)
NONFINITE_KINDS = frozenset({"constant-rounds", "constant-underflow", "constant-overflow", "overflow"})


def cause_of(ops: list[Finding]) -> Finding | None:
    """The last op-level finding of the step whose op can make a non-finite value."""
    return next((f for f in reversed(ops) if f.data.get("kind") in NONFINITE_KINDS), None)


def inside(module: object, ops: list[tuple[Finding, object]]) -> Finding | None:
    """The first op-level finding whose op ran in `module` (an nn.Module) or in a module inside it."""
    within = {id(m) for m in module.modules()} if hasattr(module, "modules") else set()
    return next((f for f, owner in ops if id(owner) in within), None)


def wrong_module(finding: Finding, cause: Finding) -> None:
    """A module's finite-but-wrong output whose op was not located, when an op-level finding ran
    inside it: that op is where it went wrong (its fix leads); the module's finding follows from it."""
    loc = cause.location
    op = f"`{loc.op}`" if loc is not None and loc.op else "an op"
    at = f" at {where(loc.file, loc.line)}" if loc is not None and loc.file and loc.line else ""
    finding.message += (
        f" Inside it, {op}{at} was found wrong in this dtype (its {cause.code} finding): fix that op first."
    )
    finding.severity = Severity.INFO
    finding.fixes = []
    finding.data["consequence_of"] = f"{loc.op if loc is not None else 'op'}{at}"
    cause.severity = Severity.ERROR


def explain(loss: Finding, cause: Finding) -> None:
    """Make `loss` (the gradient arriving non-finite at the model output) the consequence of `cause`."""
    loc = cause.location
    op = f"`{loc.op}`" if loc is not None and loc.op else "an op"
    at = f" at {where(loc.file, loc.line)}" if loc is not None and loc.file and loc.line else ""
    value = loss.data.get("value", "non-finite")
    steps = loss.data.get("steps") or [0]
    loss.message = (
        f"The gradient arriving at the model output is already {value} at step {steps[0]}: the loss "
        f"is computed after the model by {op}{at}, whose {cause.code} finding says why its result "
        f"(or its derivative) is inf in this dtype; backward carried it into the model. Fix that op "
        "first; loss scaling cannot help (a scaled inf or NaN stays one)."
    )
    loss.severity = Severity.INFO
    loss.fixes = []
    loss.data["consequence_of"] = f"{loc.op if loc is not None else 'op'}{at}"
    if cause.severity != Severity.ERROR:
        cause.severity = Severity.ERROR
        cause.message += (
            f" Its backward made the gradient reaching the model's output {value} at step {steps[0]}."
        )
