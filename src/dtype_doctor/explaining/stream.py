"""Input of any size read in bounded memory: bytes → cleaned blocks of whole lines → a sliding window.

`blocks(raw)` reads a str, bytes or a binary file object in 1 MB chunks, decodes them with one
incremental decoder (the encoding is decided from the first chunk: `normalize.sniff`), cuts at
line ends (a line longer than `MAX_LINE` is read in pieces, cut at a space when there is one) and
cleans each block (`normalize.clean`). `Window` keeps what the scanner may look at around a
candidate line: up to `HISTORY` characters above it (its traceback) and `AHEAD` lines below (a
wrapped message, an excerpt's traceback under its message). `Sample` keeps the head and the tail
of each input for the fallback stage, and the whole text when it is short. Memory is bounded by a
constant whatever the input: no line, block or window grows with it.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from .normalize import clean, sniff

CHUNK = 1 << 20  # bytes (or characters) read at a time
MAX_LINE = 64 * 1024  # a longer line is read in pieces of this size
HISTORY = 64 * 1024  # characters above a candidate line kept for its traceback
AHEAD = 32  # lines below a candidate line kept (wrapped messages, an excerpt's traceback below)
HEAD = 16 * 1024  # characters of each input's start and end kept for the fallback stage
TAIL = 48 * 1024
WHOLE = 16 * 1024  # an input this short is also kept whole (read once more as one joined line)

Source = str | bytes | bytearray | BinaryIO


def _chunks(raw: Source) -> Iterator[str]:
    """Decoded text of any input, in chunks."""
    if isinstance(raw, str):
        for i in range(0, len(raw), CHUNK):
            yield raw[i : i + CHUNK]
        return
    if isinstance(raw, (bytes, bytearray)):
        view = memoryview(raw)
        read = iter(bytes(view[i : i + CHUNK]) for i in range(0, len(view), CHUNK))
    else:
        read = iter(lambda: raw.read(CHUNK), b"")
    first = next(read, b"")
    encoding, skip = sniff(first)
    decoder = codecs.getincrementaldecoder(encoding)(errors="replace")
    yield decoder.decode(first[skip:])
    for data in read:
        yield decoder.decode(data)
    yield decoder.decode(b"", final=True)


def _cut(text: str) -> int:
    """Where to cut a line longer than MAX_LINE: after the last space of its last 1 KB, else at MAX_LINE."""
    space = text.rfind(" ", MAX_LINE - 1024, MAX_LINE)
    return space + 1 if space > 0 else MAX_LINE


def blocks(raw: Source) -> Iterator[str]:
    """Cleaned blocks of whole lines (each ends with a line end, the last may not)."""
    carry = ""
    for chunk in _chunks(raw):
        text = carry + chunk if carry else chunk
        end = max(text.rfind("\n"), text.rfind("\r"))
        if text and end == len(text) - 1 and text[end] == "\r":  # `\r\n` may be cut between two chunks
            end = max(text.rfind("\n", 0, end), text.rfind("\r", 0, end))
        carry = text[end + 1 :]
        out = text[: end + 1]
        pieces = []
        while len(carry) > MAX_LINE:  # one line longer than MAX_LINE: read it in pieces
            at = _cut(carry)
            pieces.append(carry[:at] + "\n")
            carry = carry[at:]
        if pieces:
            out += "".join(pieces)
        if out:
            yield clean(out)
    if carry:
        yield clean(carry)


@dataclass
class Sample:
    """What the fallback stage reads of one input: its head and tail, and the whole of a short one."""

    source: str | None
    head: str = ""
    tail: str = ""  # the last TAIL to 2*TAIL characters, or the whole text while it is shorter
    tail_line: int = 1  # number of the first line in `tail`
    size: int = 0
    lines: int = 0  # line ends seen so far
    cut: bool = False  # the tail no longer starts at the input's start

    def add(self, block: str) -> None:
        if len(self.head) < HEAD:
            self.head += block[: HEAD - len(self.head)]
        self.size += len(block)
        if len(block) >= TAIL:
            drop = len(block) - TAIL
            self.tail_line = self.lines + block.count("\n", 0, drop) + 1
            self.tail, self.cut = block[drop:], True
        else:
            self.tail += block
            if len(self.tail) > 2 * TAIL:
                drop = len(self.tail) - TAIL
                self.tail_line += self.tail.count("\n", 0, drop)
                self.tail, self.cut = self.tail[drop:], True
        self.lines += block.count("\n")

    def chunks(self) -> list[tuple[str, int]]:
        """The parts read, each with the number of its first line."""
        if not self.cut and self.size <= HEAD + TAIL:
            return [(self.tail, 1)]
        tail = self.tail[-TAIL:]
        return [(self.head, 1), (tail, self.tail_line + self.tail.count("\n", 0, len(self.tail) - len(tail)))]

    def whole(self) -> str | None:
        return self.tail if not self.cut and self.size <= WHOLE else None
