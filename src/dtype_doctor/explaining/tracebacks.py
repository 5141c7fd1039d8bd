"""Python tracebacks inside arbitrary text: frames above an error line, rank prefixes, call hints.

No torch import; pure text. Used by `explain`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..catalog.libraries import PLUMBING_LIBRARIES

# `[rank3]: ...` (torchrun >= 2.2), `[default3]:...` (elastic agent), `rank3: ...`
_RANK_PREFIX = re.compile(r"^\s{0,8}\[(?:rank|default)(\d{1,5})\]:\s?")
_FRAME = re.compile(r'File "(?P<file>[^"\n]{1,500})", line (?P<line>\d{1,9})(?:, in (?P<fn>[^\s]{1,200}))?')
# IPython/Jupyter: `File ~/venv/.../linear.py:114, in Linear.forward(self, input)`, `Cell In[3], line 5`,
# and the executed line marked `-> 114     return F.linear(...)` / `----> 5 lin(x)`
_IPY_FRAME = re.compile(
    r"^\s{0,4}(?:File (?P<file>[^\s:][^\n]{0,500}?):(?P<line>\d{1,9}), in (?P<fn>[^\s(]{1,200})"
    r"|Cell (?P<cell>In ?\[\d{1,6}\]), line (?P<cline>\d{1,9}))"
)
_IPY_ARROW = re.compile(r"^\s{0,8}-{0,8}> ?\s{0,4}\d{1,9}\s(?P<code>.{0,300})")
_CARETS = re.compile(r"^[\s^~]+$")
# `self.post_quant_conv(z)` / `self.model.vision(image)`: the module a frame called, and its argument
_CALL = re.compile(r"\b(self(?:\.\w{1,80}){1,8})\(\s{0,4}(?:(\w{1,80})(?=\s{0,4}[,)]))?")
_TORCH_PATH = re.compile(r"[/\\]torch[/\\]")
# frameworks whose own `self.x(...)` calls are plumbing, not the user's modules
_FRAMEWORK_PATH = re.compile(
    rf"[/\\](?:{'|'.join(PLUMBING_LIBRARIES)})[/\\]|[/\\]onediff[/\\]infer_compiler[/\\]|^<frozen "
)

MAX_WALK = 400  # lines looked at above one error line
MAX_GAP = 25  # non-frame lines in a row that end a traceback


@dataclass
class Frame:
    file: str
    line: int
    function: str | None
    code: str | None = None
    log_line: int | None = None  # line number of the `File ...` line in the input

    @property
    def is_torch(self) -> bool:
        return bool(_TORCH_PATH.search(self.file))

    def describe(self) -> str:
        text = f'File "{self.file}", line {self.line}, in {self.function}'
        return f"{text}: {self.code}" if self.code else text


def split_rank(line: str) -> tuple[int | None, str]:
    """`[rank2]: RuntimeError: ...` → (2, 'RuntimeError: ...')."""
    m = _RANK_PREFIX.match(line)
    if m:
        return int(m.group(1)), line[m.end() :]
    return None, line


def frames_above(lines: list[str], rank: int | None, first_line_no: int) -> tuple[list[Frame], list[str]]:
    """Frames of the traceback that ends just below `lines` (oldest first), and the lines read.

    `lines` are the input lines above the error line, nearest last; `first_line_no` is the
    1-based number of lines[0]. Lines of other ranks (interleaved multi-process output) are
    skipped. Stops at `Traceback (most recent call last):`, after MAX_GAP lines without a
    frame, or after MAX_WALK lines.
    """
    frames: list[Frame] = []
    read: list[str] = []
    pending_code: str | None = None
    gap = 0
    start = len(lines) - 1
    stop = max(-1, start - MAX_WALK)
    for i in range(start, stop, -1):
        line_rank, body = split_rank(lines[i])
        if rank is not None and line_rank is not None and line_rank != rank:
            continue
        if "Traceback (most recent call last)" in body:
            break
        read.append(body)
        frame = _parse_frame(body, pending_code, first_line_no + i)
        if frame:
            frames.append(frame)
            pending_code = None
            gap = 0
            continue
        gap += 1
        if gap > MAX_GAP:
            break
        arrow = _IPY_ARROW.match(body)
        if arrow:
            pending_code = arrow.group("code").strip()
            continue
        stripped = body.strip()
        if stripped and not _CARETS.match(stripped) and not stripped[0].isdigit():
            pending_code = stripped[:300]
    frames.reverse()
    return frames, read


def _parse_frame(body: str, code: str | None, log_line: int) -> Frame | None:
    m = _FRAME.search(body)
    if m:
        return Frame(m.group("file"), int(m.group("line")), m.group("fn"), code, log_line)
    m = _IPY_FRAME.match(body)
    if m and m.group("cell"):
        return Frame(f"<{m.group('cell')}>", int(m.group("cline")), "<cell>", code, log_line)
    if m:
        return Frame(m.group("file"), int(m.group("line")), m.group("fn").rsplit(".", 1)[-1], code, log_line)
    return None


def culprit_frame(frames: list[Frame]) -> Frame | None:
    """The deepest frame outside torch and framework plumbing (user or library code), else the deepest."""
    for frame in reversed(frames):
        if not _FRAMEWORK_PATH.search(frame.file):
            return frame
    return frames[-1] if frames else None


def is_frame_line(line: str) -> bool:
    """A `File "...", line N` line, or IPython's frame header or `-> N code` line: never an error line."""
    return bool(_FRAME.search(line) or _IPY_FRAME.match(line) or _IPY_ARROW.match(line))


def call_hint(frames: list[Frame]) -> tuple[str | None, str | None]:
    """(`self.linear_1`, `sample`) from the deepest library/user frame whose code calls a submodule."""
    for frame in reversed(frames):
        if not frame.code or _FRAMEWORK_PATH.search(frame.file):
            continue
        m = _CALL.search(frame.code)
        if m and not any(part.startswith("_") for part in m.group(1).split(".")[1:]):
            return m.group(1), m.group(2)
    return None, None


def op_of(frames: list[Frame]) -> str | None:
    """The torch function that raised: `linear.forward`, `conv._conv_forward`, `functional.layer_norm`."""
    for frame in reversed(frames):
        if frame.is_torch:
            base = re.split(r"[/\\]", frame.file)[-1].removesuffix(".py")
            return f"{base}.{frame.function}" if frame.function else base
        break
    return None
