"""Each library message once: compare builds the model once per precision, and a library that
warns at each build (diffusers' "modules ... should be kept in float32" at `.to()`) would say
the same line once per run. Repeats of a logging record or a Python warning are dropped while
the comparison runs; the first one reaches the user as it would have.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from typing import Any


class _Once(logging.Filter):
    def __init__(self) -> None:
        super().__init__("")
        self.said: set[tuple[str, int, str]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            key = (record.name, record.levelno, record.getMessage())
        except Exception:
            return True
        if key in self.said:
            return False
        self.said.add(key)
        return True


def _handlers() -> list[logging.Handler]:
    loggers: list[Any] = [logging.getLogger()]
    loggers += [x for x in logging.Logger.manager.loggerDict.values() if isinstance(x, logging.Logger)]
    found: list[logging.Handler] = []
    for logger in loggers:
        found += [h for h in logger.handlers if h not in found]
    if logging.lastResort is not None and logging.lastResort not in found:
        found.append(logging.lastResort)
    return found


@contextlib.contextmanager
def each_message_once() -> Iterator[None]:
    """Within the block, a repeated log record (same logger, level, text) or warning is dropped."""
    once = _Once()
    handlers = _handlers()
    for h in handlers:
        h.addFilter(once)
    shown: set[tuple[type, str]] = set()
    show = warnings.showwarning

    def show_once(message: Any, category: type, *args: Any, **kwargs: Any) -> None:
        key = (category, str(message))
        if key not in shown:
            shown.add(key)
            show(message, category, *args, **kwargs)

    warnings.showwarning = show_once
    try:
        yield
    finally:
        if warnings.showwarning is show_once:
            warnings.showwarning = show
        for h in handlers:
            h.removeFilter(once)
