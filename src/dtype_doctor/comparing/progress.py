"""Progress of a comparison, reported through a callback (compare itself never prints)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ProgressEvent:
    """One step of a comparison: `done` of `total` steps finished (`total` grows when keep-in-fp32
    rows are added); `variant` is the precision being measured, `stage` what is being done to it."""

    done: int
    total: int
    variant: str
    stage: str


OnProgress = Callable[[ProgressEvent], None]


class Tracker:
    """Counts the steps and calls `on_progress` (if any) at each change."""

    def __init__(self, on_progress: OnProgress | None, total: int) -> None:
        self.on_progress = on_progress
        self.done, self.total = 0, total

    def stage(self, variant: str, stage: str) -> None:
        if self.on_progress is not None:
            self.on_progress(ProgressEvent(self.done, self.total, variant, stage))

    def add(self, steps: int = 1) -> None:
        self.total += steps

    def advance(self) -> None:
        self.done += 1


@contextlib.contextmanager
def rich_progress() -> Iterator[OnProgress]:
    """An `on_progress` callback drawing a transient rich progress bar on stderr."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task("compare", total=0)

        def show(event: ProgressEvent) -> None:
            bar.update(
                task,
                completed=event.done,
                total=event.total,
                description=f"{event.variant}: {event.stage}",
            )

        yield show


def line_progress(
    stream: Any, every: float = 5.0, clock: Callable[[], float] = time.monotonic, label: str = "compare"
) -> OnProgress:
    """An `on_progress` callback for a stream that is no terminal (a CI log): one plain line per step
    (`dtype-doctor compare: 2/7 fp16: timing`), at most one each `every` seconds, the last step always."""
    last: list[float] = []

    def show(event: ProgressEvent) -> None:
        now = clock()
        step = min(event.done + 1, event.total)  # the step under way; the last event is "done"
        if last and now - last[0] < every and step < event.total:
            return
        last[:] = [now]
        print(f"dtype-doctor {label}: {step}/{event.total} {event.variant}: {event.stage}", file=stream)
        with contextlib.suppress(Exception):
            stream.flush()

    return show
