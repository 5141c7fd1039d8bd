"""pytest plugin: a failing test reports the dtype finding, not only the raw RuntimeError.

    pytest --dtype-doctor          every test body runs under dtype_doctor.watch (observe mode)
    def test_x(dtype_doctor): ...  this test's body runs under watch; `dtype_doctor` is the session

A failing test gets a "dtype-doctor" report section (module, operands, origins, fixes) and its
one-line summary names the finding. Registered through the `pytest11` entry point; this module
imports neither torch nor dtype_doctor.watch until a test asks for them, so suites that do not
use it start as fast as before.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any

import pytest

_HOLDER = pytest.StashKey["_Watched"]()


class _Watched:
    """A watch session opened in one hook and closed, once, in another."""

    def __init__(self, **kwargs: Any) -> None:
        from dtype_doctor.watching import watch

        self._cm = watch(**kwargs)
        self.session = self._cm.__enter__()
        self._closed = False

    def close(self, exc: BaseException | None = None) -> None:
        if self._closed:
            return
        self._closed = True
        if exc is None:
            self._cm.__exit__(None, None, None)
        else:
            self._cm.__exit__(type(exc), exc, exc.__traceback__)

    @property
    def findings(self) -> list:
        report = getattr(self.session, "report", None)
        return list(report.findings) if report is not None else []


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dtype-doctor")
    group.addoption(
        "--dtype-doctor",
        action="store_true",
        dest="dtype_doctor",
        help="run every test under dtype_doctor.watch and report dtype findings on failures",
    )
    group.addoption(
        "--dtype-doctor-mode",
        default="observe",
        choices=("observe", "strict"),
        help="watch mode for --dtype-doctor: observe (default) or strict (fail at silent promotions too)",
    )


def _mode(config: pytest.Config) -> str:
    return config.getoption("dtype_doctor_mode", "observe") or "observe"


@pytest.fixture
def dtype_doctor(request: pytest.FixtureRequest):
    """The watch session this test's body runs under (its `.report` holds the findings so far)."""
    try:
        holder = _Watched(mode=_mode(request.config))
    except ImportError as exc:
        pytest.skip(f"dtype_doctor.watch is unavailable: {exc}")
    request.node.stash[_HOLDER] = holder
    yield holder.session
    holder.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    holder = item.stash.get(_HOLDER, None)
    opened_here = False
    if holder is None and item.config.getoption("dtype_doctor", False):
        try:
            holder = _Watched(mode=_mode(item.config))
        except ImportError:
            holder = None  # no watch in this build: failures are still explained from their text
        else:
            item.stash[_HOLDER] = holder
            opened_here = True
    try:
        result = yield
    except BaseException as exc:
        if holder is not None:
            _close_quietly(holder, exc)  # watch diagnoses the error on its way out (observe mode)
        raise
    if opened_here:
        _close_quietly(holder, None)
    return result


def _close_quietly(holder: _Watched, exc: BaseException | None) -> None:
    with contextlib.suppress(Exception):  # an error of the tool never replaces the test's own failure
        holder.close(exc)


def _carried(exc: BaseException) -> list:
    """The findings the tool's own exception carries (assert_dtype_consistent's): their codes are
    the diagnosis, the words of the message (the tool's own fix text among them) are not read."""
    from dtype_doctor.errors import carried_findings

    return carried_findings(exc)


def _explain(excinfo: pytest.ExceptionInfo) -> list:
    """Findings from the error text alone, when no live session saw the failure."""
    try:
        from dtype_doctor import explain
        from dtype_doctor.catalog.family_codes import UNKNOWN
    except (ImportError, AttributeError):
        return []
    try:
        result = explain(str(excinfo.value))
    except Exception:
        return []
    findings = getattr(result, "findings", result)
    return [f for f in (findings or []) if getattr(f, "code", UNKNOWN) != UNKNOWN]


_DTYPE_TEXT = re.compile(
    r"dtype|scalar ?type|same type|\b(?:half|bfloat16|float|float16|fp16|bf16|inf|nan)\b|(?:Half|Float)Tensor",
    re.IGNORECASE,
)


def _leading(findings: list, excinfo: pytest.ExceptionInfo | None) -> Any:
    """The finding to name in the summary line: an error, or any finding when the test's own
    error is about dtypes; None when the failure has another cause (a warning seen on the way is
    then only in the section)."""
    errors = [f for f in findings if str(getattr(f.severity, "value", f.severity)) == "error"]
    if errors:
        return errors[0]
    if excinfo is not None and _about_dtypes(excinfo.value):
        return findings[0]
    return None


def _about_dtypes(exc: BaseException) -> bool:
    """The error itself talks about dtypes (`assert x.dtype == torch.float16` does), not merely shows
    a tensor whose repr says `dtype=torch.float16` (`assert x.sum() == 5`)."""
    return bool(_DTYPE_TEXT.search(re.sub(r"dtype=torch\.\w+", "", str(exc))))


def _headline(finding: Any) -> str:
    where = finding.location.describe() if finding.location else ""
    operands = ", ".join(f"{o.role} {o.dtype}" for o in finding.operands if o.dtype)
    fix = f"; fix: {finding.fixes[0].title}" if finding.fixes else ""
    return f"dtype-doctor {finding.code} {where}" + (f" ({operands})" if operands else "") + fix


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if call.when != "call":
        return report
    holder = item.stash.get(_HOLDER, None)
    wanted = holder is not None or item.config.getoption("dtype_doctor", False)
    if not wanted:
        return report
    try:
        findings = holder.findings if holder is not None else []
        if report.failed and call.excinfo is not None and not findings:
            findings = _carried(call.excinfo.value) or _explain(call.excinfo)
        if not findings:
            return report
        from dtype_doctor.render.registry import render
        from dtype_doctor.report import Report

        report.sections.append(
            ("dtype-doctor", str(render("text", Report(findings=list(findings), tool="pytest"))))
        )
        crash = getattr(report.longrepr, "reprcrash", None)
        lead = _leading(findings, call.excinfo)
        if report.failed and crash is not None and lead is not None:
            crash.message = f"{_headline(lead)} | {crash.message}"
    except Exception:
        pass  # never let the plugin hide the test's own result
    return report
