"""The scan of one input: candidate lines in a sliding window, matched, traced, folded into hits.

`Scanner.run` reads the input block by block (`stream.blocks`) through a window of HISTORY
characters above and AHEAD lines below the lines being scanned; only the first occurrences of
each distinct error pay for the walk up their traceback (and the context tags that may refine the
family). Everything else is counting.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..catalog.model import ContextSignal, MessagePattern
from ..report import Evidence
from .match import Prefilter, candidate_lines, compiled, lower, match_line, match_wrapped, no_operands
from .stream import AHEAD, HISTORY, Sample, Source, blocks
from .tracebacks import Frame, culprit_frame, frames_above, is_frame_line, split_rank

WINDOW = 64 * 1024  # bytes of input above an error line searched for its traceback
TRACED_PER_ERROR = 64  # occurrences of one error text whose traceback is parsed; later ones are counted
MAX_EVIDENCE = 8
BELOW = 30  # lines after an error line read for its context
LONG_LINE = 4096  # a longer line is matched around its first trigger only
MAX_DISTINCT = 4096  # distinct error texts kept apart; later new ones fold into their family's first
_EXCEPTION_LINE = re.compile(r"[\w.]{0,120}(?:Error|Exception|Warning|Exit|Interrupt)\b:")


@dataclass
class Hit:
    """One matched error line (all its occurrences, once folded)."""

    code: str
    pattern: MessagePattern
    match: re.Match[str]
    body: str
    line_no: int
    source: str | None
    rank: int | None
    frames: list[Frame] = field(default_factory=list)
    tags: set[str] = field(default_factory=set)
    why: dict[str, str] = field(default_factory=dict)  # context tag → the text that set it
    count: int = 1
    ranks: list[int] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)
    traced: int = 1
    place: tuple | None = None  # (file, line) of the culprit frame, once traced
    log_tags: dict[str, str] = field(default_factory=dict)  # the input's facts (filled while it streams)
    env: dict[str, str] = field(default_factory=dict)  # tags of this machine that decided the family


class Scanner:
    """One input read block by block through a window: HISTORY characters above, AHEAD lines below."""

    def __init__(self, source: str | None, hits: dict[tuple, list[Hit]], sample: Sample | None) -> None:
        self.source = source
        self.hits = hits
        self.errors = 0  # distinct errors (text and place) this input added
        self.sample = sample
        self.log_tags: dict[str, str] = {}  # filled as the input streams; read when findings are built
        self.log_signals = compiled().signals.get("log", ())

    def run(self, raw: Source) -> None:
        history, pending, line_no = "", "", 1  # line_no: number of pending's first line
        for block in blocks(raw):
            if self.sample is not None:
                self.sample.add(block)
            missing = [sig for sig in self.log_signals if sig.tag not in self.log_tags]
            if missing:  # a fact about the run, looked for until found once
                self.log_tags.update(tags(block, missing))
            pending += block
            cut = _before_last_lines(pending, AHEAD)
            if cut <= 0:
                continue
            text = history + pending
            self.scan(text, len(history), len(history) + cut, line_no)
            line_no += pending.count("\n", 0, cut)
            history, pending = _keep_end(text[: len(history) + cut], HISTORY), pending[cut:]
        if pending:
            self.scan(history + pending, len(history), None, line_no)
        whole = self.sample.whole() if self.sample is not None else None
        if whole is not None and self.errors <= 1:
            # a short paste of one error is one context: code or words above its traceback count
            for tag, needle in tags(whole, compiled().signals.get("local", ())).items():
                self.log_tags.setdefault(tag, needle)

    def scan(self, text: str, lo: int, hi: int | None, line_no: int) -> None:
        """Match the candidate lines starting in text[lo:hi]; `line_no` is the number of the line at lo."""
        hits, source = self.hits, self.source
        counted_to = lo
        size = len(text)
        low = lower(text)
        prefilter = Prefilter(low)
        for start, present in candidate_lines(text, low, lo, size if hi is None else hi, prefilter):
            end = text.find("\n", start)
            if end == -1:
                end = size
            line_no += text.count("\n", counted_to, start)
            counted_to = start
            if not prefilter.could_match(present, start, end):
                continue  # a trigger word, no message around it: `precision=bf16`
            line_start = start
            if end - start > LONG_LINE:  # a message is short: match a huge line around its first trigger
                at = min(p for p in (low.find(t, start, end) for t in present) if p != -1)
                start, end = max(start, at - 1024), min(end, at + LONG_LINE - 1024)
            line = text[start:end].rstrip("\r")
            if is_frame_line(line) or _is_frame_code(text, line_start):
                continue  # `raise ValueError("Attempting to unscale ...")` quoted in a frame: not a second error
            found = match_line(line, present)
            if (found is None or no_operands(found)) and start == line_start:  # wrapped over lines?
                found = match_wrapped(text, start, end, line) or found
            if found is None:
                continue
            code, pattern, match = found
            rank, body = split_rank(line)
            if start != line_start:
                rank = split_rank(text[line_start : line_start + 64])[0]
            key = (code, match.group(0)[:500])  # the message itself, whatever prefix the logger added
            if key not in hits and len(hits) >= MAX_DISTINCT:
                key = next((k for k in hits if k[0] == code), key)  # bounded: fold into its family's first
            group = hits.setdefault(key, [])
            traced = sum(h.traced for h in group)
            if traced < TRACED_PER_ERROR:
                # the same text raised at another place is another finding: trace, then fold by place
                probe = Hit(code, pattern, match, body.strip(), line_no, source, rank, log_tags=self.log_tags)
                _trace(probe, text, line_start)
                if probe.place is None and group:  # a bare repeat (a logger line): the last traceback's error
                    hit = group[-1]
                else:
                    hit = next((h for h in group if h.place == probe.place), None)
                if hit is None:
                    group.append(probe)
                    hit = probe
                    self.errors += 1
                else:
                    hit.count += 1
                    hit.traced += 1
            elif all(h.place is None for h in group):  # past the budget, bare repeats (no traceback)
                hit = group[-1]
                hit.count += 1
            else:  # past the tracing budget: counted apart, not on whichever place was traced last
                hit = next((h for h in group if h.traced == 0), None)
                if hit is None:
                    hit = Hit(
                        code,
                        pattern,
                        match,
                        body.strip(),
                        line_no,
                        source,
                        rank,
                        log_tags=self.log_tags,
                        traced=0,
                    )
                    group.append(hit)
                else:
                    hit.count += 1
            new_rank = rank is not None and rank not in hit.ranks
            if new_rank:
                hit.ranks.append(rank)
            new_source = not any(e.source == source for e in hit.evidence)
            if (hit.count == 1 or new_rank or new_source) and len(hit.evidence) < MAX_EVIDENCE:
                hit.evidence.append(Evidence(text=line.strip()[:500], line=line_no, source=source))


def _before_last_lines(text: str, n: int) -> int:
    """Offset just after the line end that has `n` more line ends after it (0 when there are fewer)."""
    end = len(text)
    for _ in range(n + 1):
        end = text.rfind("\n", 0, end)
        if end == -1:
            return 0
    return end + 1


def _keep_end(text: str, limit: int) -> str:
    """The last whole lines of `text` that fit in `limit` characters."""
    if len(text) <= limit:
        return text
    start = text.find("\n", len(text) - limit)
    return text[start + 1 :] if start != -1 else ""


def joined(text: str) -> str:
    """A short text as one line: its message lines joined, frames and their code left out."""
    lines = text.split("\n")
    keep = []
    for i, line in enumerate(lines):
        body = split_rank(line)[1].strip()
        if not body or is_frame_line(line) or (i and is_frame_line(lines[i - 1])):
            continue
        keep.append(body)
    return " ".join(keep)


def _is_frame_code(text: str, start: int) -> bool:
    """Is the line starting at `start` the quoted source line below a `File "...", line N` line?

    Frames of `python -c`, `exec` or a `.pyc` have no source line: an exception line right below
    a frame is the error, not code.
    """
    if start == 0 or _EXCEPTION_LINE.match(split_rank(text[start : start + 300])[1]):
        return False
    prev_start = text.rfind("\n", 0, start - 1) + 1
    prev = text[prev_start : start - 1]
    return 'File "' in prev and ", line " in prev


def _trace(hit: Hit, text: str, start: int) -> None:
    lo = max(0, start - WINDOW)
    above = text[lo:start].split("\n")
    if above and above[-1] == "":
        above.pop()
    if lo > 0 and above:
        above.pop(0)  # partial line
    frames, read = frames_above(above, hit.rank, hit.line_no - len(above))
    hit.frames = frames
    frame = culprit_frame(frames)
    hit.place = (frame.file, frame.line, frame.function) if frame else None
    signals = compiled().signals
    below = "" if frames else _below(text, start)
    local_text = "\n".join([hit.body, *read, below])
    op_text = "\n".join(f"{f.file} {f.function} {f.code or ''}" for f in frames[-2:]) + "\n" + hit.body
    op_text += "\n" + below
    why = tags(local_text, signals.get("local", ()))
    why.update(tags(op_text, signals.get("op", ())))
    hit.why = why


def _below(text: str, start: int) -> str:
    """The lines after a message that has no traceback above it (a pasted excerpt).

    An excerpt often puts its traceback and its words below the message. A message under its own
    traceback, as in a log, is not read past: what follows it is the next thing the program printed.
    """
    end = start
    for _ in range(BELOW):
        nxt = text.find("\n", end + 1)
        if nxt == -1:
            return text[start:]
        end = nxt
    return text[start:end]


def tags(text: str, signals: Iterable[ContextSignal]) -> dict[str, str]:
    """Context tags the text shows, each with the needle that set it (shown to the user)."""
    tags: dict[str, str] = {}
    low: str | None = None
    for sig in signals:
        if sig.tag in tags:
            continue
        if sig.ignorecase:
            low = low if low is not None else text.lower()
            hay = low
        else:
            hay = text
        needle = next((n for n in sig.needles if n in hay), None)
        if needle is not None:
            tags[sig.tag] = needle
    return tags
