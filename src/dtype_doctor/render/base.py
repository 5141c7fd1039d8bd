"""The base of the renderers in this package: the `registry.Renderer` protocol's class attributes
given in the class line, so that a format is its `render` method and nothing else.

    class CodesRenderer(PresentedRenderer, name="codes", extension=".codes"):
        def render(self, report, options):
            return "".join(f.code + "\\n" for f in report.findings)

`processors` default to `present` (every renderer of today reads a presented report) and
`to_stdout` to True (False: the format needs a PATH, as html and png do)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from ..processors import present
from ..report import Report


class PresentedRenderer:
    name: ClassVar[str]
    extension: ClassVar[str]
    processors: ClassVar[Sequence[Callable[[Report], Report]]] = (present,)
    to_stdout: ClassVar[bool] = True

    def __init_subclass__(cls, *, name: str, extension: str, to_stdout: bool = True, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.name, cls.extension, cls.to_stdout = name, extension, to_stdout

    def render(self, report: Report, options: Any) -> str | bytes:
        raise NotImplementedError(f"{type(self).__name__}.render")
