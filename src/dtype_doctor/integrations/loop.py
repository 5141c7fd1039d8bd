"""What the training-loop callbacks (transformers, Lightning) share: one watch session over the run,
findings counted into the loop's logs, one console summary and optional JSON/HTML files at the end."""

from __future__ import annotations

import logging
import sys
import warnings
from pathlib import Path
from typing import Any

from ..report import Report, Severity

log = logging.getLogger("dtype_doctor")

PREFIX = "dtype_doctor/"


class LoopWatch:
    """A watch session opened at train begin and closed at train end (or on the loop's exception)."""

    def __init__(
        self,
        mode: str = "observe",
        numerics: bool = False,
        every: int = 1,
        json_path: str | Path | None = None,
        html_path: str | Path | None = None,
        summary: bool = True,
    ) -> None:
        self.mode = mode
        self.numerics = numerics
        self.every = every
        self.json_path = json_path
        self.html_path = html_path
        self.summary = summary
        self.report = Report(tool="train")
        self._session: Any = None
        self._model: Any = None
        self._announced = 0

    @property
    def active(self) -> bool:
        return self._session is not None

    def start(self, model: Any) -> None:
        if self._session is not None:
            return
        from ..watching import watch

        self.report = Report(tool="train")
        self._announced = 0
        session = watch(
            model=model, mode=self.mode, numerics=self.numerics, report=self.report, every=self.every
        )
        session.__enter__()
        self._session = session
        self._model = model

    def stop(self, exc: BaseException | None = None) -> Report:
        """Close the session (an exception gets watch's diagnosis in its notes), summarise, write files."""
        session, self._session = self._session, None
        if session is not None:
            if exc is None:
                session.__exit__(None, None, None)
            else:
                session.__exit__(type(exc), exc, exc.__traceback__)
            self._finish(exc)
        return self.report

    def metrics(self) -> dict[str, float]:
        """Numbers for the loop's logs: findings so far, by severity and by code."""
        findings = self.report.findings
        out = {
            f"{PREFIX}findings": float(sum(f.count for f in findings)),
            f"{PREFIX}errors": float(sum(f.count for f in findings if f.severity == Severity.ERROR)),
        }
        for f in findings:
            key = f"{PREFIX}{f.code}"
            out[key] = out.get(key, 0.0) + f.count
        return out

    def announce_new(self) -> list[str]:
        """One log line per finding not announced yet; returns the lines."""
        lines = []
        for f in self.report.findings[self._announced :]:
            where = f.location.describe() if f.location else ""
            lines.append(f"dtype-doctor: {f.severity.value} {f.code} {where}".rstrip())
        for line in lines:
            log.warning(line)
        self._announced = len(self.report.findings)
        return lines

    def _finish(self, exc: BaseException | None = None) -> None:
        """The summary on stderr (a finding the exception's note shows there as one line), files."""
        from ..render.outputs import Output
        from ..render.registry import RenderOptions
        from ..sections import DtypeMap

        if self._model is not None and self.report.section(DtypeMap) is None:
            from ..dtype_map import module_dtype_map

            try:
                self.report.sections.append(module_dtype_map(self._model))
            except Exception as exc:  # the map is a nicety; never fail the run's end for it
                log.warning("dtype-doctor: cannot map the model's dtypes: %s", exc)
        if self.summary:
            try:
                from rich.console import Console

                from ..watching.failures import noted_in

                noted = tuple(noted_in(exc)) if exc is not None else ()
                console = Console(file=sys.stderr, highlight=False)
                self._emit(Output("console"), RenderOptions(console=console, noted=noted))
            except Exception as exc:  # a summary we cannot print must not fail the run's end
                log.warning("dtype-doctor: cannot print the summary: %s", exc)
        # a file that cannot be written is reported, never raised: training has finished by now
        for name, path in (("json", self.json_path), ("html", self.html_path)):
            if path:
                self._write(path, Output(name, str(path)))

    def _emit(self, output: Any, options: Any = None) -> None:
        from ..render.outputs import emit

        emit(self.report, [output], options)

    def _write(self, path: str | Path, output: Any) -> None:
        try:
            self._emit(output)
        except Exception as exc:
            message = f"dtype-doctor: cannot write the report to {path}: {exc}"
            log.warning(message)
            warnings.warn(message, RuntimeWarning, stacklevel=2)


class LoopCallback:
    """The part of the transformers and Lightning callbacks that is the same: the options and the report."""

    def __init__(
        self,
        numerics: bool = False,
        mode: str = "observe",
        every: int = 1,
        json_path: str | Path | None = None,
        html_path: str | Path | None = None,
        summary: bool = True,
    ) -> None:
        self._loop = LoopWatch(mode, numerics, every, json_path, html_path, summary)

    @property
    def report(self) -> Report:
        return self._loop.report
