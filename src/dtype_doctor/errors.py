"""Exceptions the tool raises on purpose."""

from __future__ import annotations


class DoctorError(Exception):
    """Bad input or usage: the CLI prints it as one line and exits 2."""


class DtypeMismatchError(RuntimeError):
    """Raised by watch(mode="strict") at the first mismatch; carries the Finding."""

    def __init__(self, message: str, finding: object | None = None) -> None:
        super().__init__(message)
        self.finding = finding
