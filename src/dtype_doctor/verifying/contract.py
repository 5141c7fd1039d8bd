"""The verification contract every back-end keeps: the three labels, the threshold on the error
against float32, and what is never run.

A fix is `verified` only when the original failing program point passes, the rest of the program
(the whole outer call, or the whole program) runs, and its output's max relative error against
float32, computed on the same inputs, is within THRESHOLD; a fix with no code (a comment, `pass`)
is never run and never verified. Every fix shown carries one of the labels.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

# max |got - fp32| / max |fp32| of the first output fp32 makes non-zero: a half-precision model
# of a few layers stays well under it; a wrong input or a dropped term does not
THRESHOLD = 5e-2
NO_CODE = "not verified (a comment or an empty edit: no code to run)"
NOT_PYTHON_WHY = "not Python code to replay"
NOT_PYTHON = f"not verified ({NOT_PYTHON_WHY})"


@dataclass
class Verdict:
    """passes: True verified, False fails, None not verified; text: the label the user reads."""

    passes: bool | None
    text: str


def verified(what: str) -> Verdict:
    return Verdict(True, f"verified: {what}")


def fails(why: str) -> Verdict:
    return Verdict(False, f"fails: {why}")


def not_verified(why: str) -> Verdict:
    return Verdict(None, f"not verified ({why})")


def has_code(source: str) -> bool:
    """The snippet does something: not only comments, `pass`, `...` or a string."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return True  # it is code, broken: the back-end says so
    return any(not _inert(stmt) for stmt in tree.body)


def _inert(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Pass) or (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant))


def same_code(before: str, after: str) -> bool:
    """An edit that changes only comments or layout (the same syntax tree): nothing to run."""
    try:
        return ast.dump(ast.parse(before)) == ast.dump(ast.parse(after))
    except SyntaxError:
        return before == after


def on_error(err: float | None, ran: str = "the replayed call passes") -> Verdict:
    """The verdict of a run that completed, from its error against float32 (None: not measurable)."""
    limit = f"{THRESHOLD:.0e}"
    if err is None:
        return verified(f"{ran} (no non-zero float output to compare with fp32)")
    if err != err or err == float("inf"):
        return fails("replayed, the output is not finite")
    if err > THRESHOLD:
        return fails(f"replayed, max rel. error {err:.0e} vs fp32 is over the threshold {limit}")
    return verified(f"passes, max rel. error {err:.0e} vs fp32 (threshold {limit})")


RANK = {True: 0, None: 1, False: 2}  # verified fixes first, failing ones last


def label_rest(fixes: list, why: str) -> None:
    """Give every fix without a label one: no fix is shown unlabelled."""
    for fix in fixes:
        if not fix.verification:
            fix.verification = unverified_label(fix, why)


def unverified_label(fix: Any, why: str) -> str:
    """The label of a fix that was not run: not Python, no code, or not verified (why)."""
    if fix.language != "python":
        return NOT_PYTHON
    if not has_code(fix.snippet):
        return NO_CODE
    return not_verified(why).text


# why a command leaves a fix untried (report.tool -> why), for the fixes no back-end labelled
UNTRIED = {
    "explain": "explain only reads the error text: nothing was run",
    "check": "check replays only the first error's first fixes",
    "audit": "audit only reads the model: nothing was run",
    "numerics": "a numerics finding's fixes are not replayed",
}
UNTRIED_DEFAULT = "only an error's first fixes are replayed"


def untried_reason(tool: str) -> str:
    """Why a fix of a `tool` report carries no verifier label."""
    return UNTRIED.get(tool, UNTRIED_DEFAULT)
