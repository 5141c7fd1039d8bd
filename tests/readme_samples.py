"""The README's sample outputs are what their commands print (issue 41: true by construction).

A sample is a plain fenced block whose first line is `$ COMMAND`; the rest of the block is what
COMMAND prints, stdout and stderr together, at COLUMNS=80 without colour, run where the README's
commands run (tests/test_readme.py, a fresh checkout, every block before it run first). That test
compares each sample with its command's output and fails when they drift; with
DTYPE_DOCTOR_WRITE_SAMPLES=1 it writes the outputs into README.md instead:

    DTYPE_DOCTOR_WRITE_SAMPLES=1 .venv/bin/python -m pytest tests/test_readme.py -k fresh_checkout

A line `...` in a sample stands for any run of lines (an elision written by hand); durations
(`8.4 s`), the checkout's own path, temporary folders and the smallest non-zero value numerics
measures (a rounding of the CPU's kernels) compare as equal.
"""

from __future__ import annotations

import re

SAMPLE = re.compile(r"^```\n\$ (?P<command>[^\n]+)\n(?P<body>.*?)^```$", re.S | re.M)
_VOLATILE = (
    (re.compile(r"\b\d+(?:\.\d+)? ?(s|ms|min)\b"), r"# \1"),  # durations
    (re.compile(r"/tmp/[^\s/]+(?:/[^\s/:]+)*/"), "/tmp/…/"),  # temporary folders
    # the smallest non-zero activation: a rounding of this CPU's kernels (AVX2 and AVX512 differ)
    (re.compile(r"(smallest non-zero) \d[\d.e+-]*"), r"\1 #"),
    (re.compile(r"[ \t]+$", re.M), ""),
)


def samples(text: str) -> dict[str, str]:
    """{command: the block's body} of every sample in `text`."""
    return {m["command"]: m["body"] for m in SAMPLE.finditer(text)}


def cut_checkout(text: str, checkout: str) -> str:
    """`text` with the checkout's own path cut from file names, a box's line padded back to its width."""
    if not checkout:
        return text
    prefix = checkout.rstrip("/") + "/"
    lines = []
    for line in text.splitlines():
        cut = line.replace(prefix, "")
        if cut != line and line.startswith("│") and line.endswith("│"):
            cut = cut[:-1] + " " * (len(line) - len(cut)) + "│"
        lines.append(cut)
    return "\n".join(lines)


def normal(text: str, checkout: str = "") -> str:
    text = cut_checkout(text, checkout)
    for pattern, repl in _VOLATILE:
        text = pattern.sub(repl, text)
    return text.strip("\n")


def matches(sample: str, actual: str, checkout: str = "") -> bool:
    """`sample` is `actual` (both `normal`), a line `...` standing for any run of lines."""
    want, got = normal(sample).splitlines(), normal(actual, checkout).splitlines()
    chunks: list[list[str]] = [[]]
    for line in want:
        if line.strip() == "...":
            chunks.append([])
        else:
            chunks[-1].append(line)
    if len(chunks) == 1:
        return want == got
    first, *middle, last = chunks
    if got[: len(first)] != first:
        return False
    at = len(first)
    for part in middle:
        found = next((j for j in range(at, len(got) - len(part) + 1) if got[j : j + len(part)] == part), None)
        if found is None:
            return False
        at = found + len(part)
    return not last or (len(got) - len(last) >= at and got[len(got) - len(last) :] == last)


def elide_library_frames(text: str) -> str:
    """A traceback's frames in files outside the checkout (torch's, a library's: their paths are this
    machine's) as one `...` line per run of them."""
    out: list[str] = []
    skipping = False
    for line in text.splitlines():
        if line.startswith('  File "/'):
            if not skipping:
                out.append("...")
            skipping = True
            continue
        if skipping and line.startswith("    "):
            continue
        skipping = False
        out.append(line)
    return "\n".join(out)


def rewrite(text: str, outputs: dict[str, str], checkout: str = "") -> str:
    """`text` with each sample's body replaced by its command's output (the checkout's path cut)."""

    def body(m: re.Match) -> str:
        out = outputs.get(m["command"])
        if out is None:
            return m.group(0)
        out = cut_checkout(out, checkout)
        out = elide_library_frames(re.sub(r"[ \t]+$", "", out, flags=re.M).strip("\n"))
        return f"```\n$ {m['command']}\n{out}\n```"

    return SAMPLE.sub(body, text)
