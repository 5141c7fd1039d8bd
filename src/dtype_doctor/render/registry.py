"""The output formats: one `Renderer` protocol and the registry of them, keyed by name.

A renderer (modelled on pyinstrument's `Renderer`) has a `name`, the file `extension` it writes,
the `processors` its input must have been through, where it goes by default (`to_stdout`), and one
method, `render(report, options) -> str | bytes`. A new format is one file with one class and one
line in `_RENDERERS` below: `dtype-doctor CMD --output NAME[=PATH]` then writes it, from every
command and integration. Entries are import paths, so naming the formats imports none of them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

from ..errors import DoctorError
from ..report import Report

# name -> "module:Class", relative to this package
_RENDERERS: dict[str, str] = {
    "console": ".terminal:ConsoleRenderer",
    "text": ".text:TextRenderer",
    "json": ".json:JsonRenderer",
    "html": ".html:HtmlRenderer",
    "png": ".png:PngRenderer",
    "sarif": ".sarif:SarifRenderer",
    "github": ".github:GithubRenderer",
}


@dataclass(frozen=True)
class RenderOptions:
    """What a renderer may be told besides the report. `console`: the rich Console the console
    renderer draws for (its width, colour, terminal); `empty`: the line shown instead of "no
    problems found"; `base`: where SARIF and GitHub look for the repository whose top level their
    paths start at (default: the working folder; places.source_root); `quiet`: one line per
    finding; `noted`: findings (`CODE at WHERE`) an exception note on the console's stream showed
    already (a one-line reference instead of their panel). `color=None`: rich decides (a terminal,
    `NO_COLOR`, `FORCE_COLOR`)."""

    verbose: bool = False
    color: bool | None = None
    width: int | None = None
    console: Any = None
    empty: str | None = None
    base: str | None = None
    quiet: bool = False
    noted: tuple[str, ...] = ()


@runtime_checkable
class Renderer(Protocol):
    name: ClassVar[str]
    extension: ClassVar[str]
    processors: ClassVar[Sequence[Callable[[Report], Report]]]
    to_stdout: ClassVar[bool]  # without a PATH: True → stdout, False → the format needs a PATH

    def render(self, report: Report, options: RenderOptions) -> str | bytes: ...


def names() -> tuple[str, ...]:
    return tuple(_RENDERERS)


def get(name: str) -> Renderer:
    """The renderer called `name`; a DoctorError naming the formats there are when none is."""
    target = _RENDERERS.get(name)
    if target is None:
        raise DoctorError(f"unknown output format {name!r}: choose from {', '.join(_RENDERERS)}")
    module, _, cls = target.partition(":")
    return getattr(importlib.import_module(module, __package__), cls)()


def for_extension(path: str) -> str | None:
    """The format whose file extension `path` ends in (`merged.json` → json), the longest one
    (`a.github.txt` → github, not text), or None."""
    lowered = path.lower()
    found = [(len(ext), name) for name in _RENDERERS if lowered.endswith(ext := get(name).extension)]
    return max(found)[1] if found else None


def prepare(renderer: Renderer, report: Report, done: dict[tuple, Report] | None = None) -> Report:
    """`report` through the renderer's processors; `done` caches the result per processor chain, so
    the outputs of one emit that share a chain process the report once."""
    chain = tuple(renderer.processors)
    if done is not None and chain in done:
        return done[chain]
    for processor in chain:
        report = processor(report)
    if done is not None:
        done[chain] = report
    return report


def render(name: str, report: Report, options: RenderOptions | None = None) -> str | bytes:
    """The report in format `name`, processed as that renderer needs (for integrations and tests)."""
    renderer = get(name)
    return renderer.render(prepare(renderer, report), options or RenderOptions())
