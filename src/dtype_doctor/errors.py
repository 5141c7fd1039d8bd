"""Exceptions the tool raises on purpose."""

from __future__ import annotations


class DoctorError(Exception):
    """Bad input or usage: the CLI prints it as one line and exits 2."""


class DtypeMismatchError(RuntimeError):
    """Raised by watch(mode="strict") at the first mismatch; carries the Finding."""

    def __init__(self, message: str, finding: object | None = None) -> None:
        super().__init__(message)
        self.finding = finding


class DtypeAssertionError(AssertionError):
    """Raised by assert_dtype_consistent; carries the findings it names, so a reader (the pytest
    plugin) takes their codes from them rather than from the words of the message."""

    def __init__(self, message: str, findings: list | tuple = ()) -> None:
        super().__init__(message)
        self.findings = list(findings)


def carried_findings(exc: BaseException) -> list:
    """The findings one of the tool's own exceptions carries (DtypeAssertionError's,
    DtypeMismatchError's): read by their codes, never from the words of the message."""
    if isinstance(exc, DtypeAssertionError):
        return list(exc.findings)
    if isinstance(exc, DtypeMismatchError) and exc.finding is not None:
        return [exc.finding]
    return []
