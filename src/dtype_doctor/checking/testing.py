"""Assertions for users' own test suites."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..report import Report, Severity

__all__ = ["assert_dtype_consistent"]


def assert_dtype_consistent(
    model: Any,
    inputs: Any = (),
    dtype: Any = None,
    *,
    autocast: Any = None,
    keep_fp32: Iterable[Any] = (),
    allow: Iterable[str] = (),
    min_severity: str = "warning",
) -> Report:
    """Fail (AssertionError naming module, operands, origins and fixes) if a forward of `model` on
    `inputs` would mix dtypes. Built on `check`: a dry run on the meta device, no compute.

    inputs: one tensor/spec, a tuple/list of positional inputs, or a dict of keyword inputs.
    dtype: the precision to check the model in (as `from_pretrained(torch_dtype=...)` would load
    it); None checks the dtypes the model has. allow: finding codes to tolerate.
    min_severity: "error" fails on errors only; "warning" (default) also on silent promotions.
    Returns the check report when nothing fails.
    """
    from .check import check

    args: tuple[Any, ...]
    if isinstance(inputs, Mapping):
        args, kwargs = (), dict(inputs)
    elif isinstance(inputs, tuple | list):
        args, kwargs = tuple(inputs), {}
    else:
        args, kwargs = (inputs,), {}
    report = check(model, *args, dtype=dtype, autocast=autocast, keep_fp32=keep_fp32, **kwargs)
    levels = [Severity.ERROR] if min_severity == "error" else [Severity.ERROR, Severity.WARNING]
    allowed = set(allow)
    bad = [f for f in report.findings if f.severity in levels and f.code not in allowed]
    if bad:
        from ..errors import DtypeAssertionError
        from ..render.registry import render

        shown = Report(findings=bad, tool="check", meta=report.meta)
        raise DtypeAssertionError(
            f"{len(bad)} dtype problem{'s' if len(bad) != 1 else ''} in {type(model).__name__}: "
            + "; ".join(
                f.code + (f" in '{f.location.module}'" if f.location and f.location.module else "")
                for f in bad
            )
            + "\n"
            + str(render("text", shown)),
            shown.findings,
        )
    return report
