"""A watched finding as the exception note the user reads under their traceback: a few plain
lines, no colour, folded to the terminal's width (moved out of findings.py, unchanged)."""

from __future__ import annotations

from ..render.fold import fold_code_line, fold_prose_line, terminal_width
from ..report import Finding, Origin


def _chain(origin: Origin, depth: int = 0, limit: int = 6) -> list[tuple[int, Origin]]:
    """The ancestors of an origin, depth-first, as (depth, origin) pairs."""
    out: list[tuple[int, Origin]] = []
    for c in origin.chain:
        if len(out) >= limit:
            break
        out.append((depth, c))
        out.extend(_chain(c, depth + 1, limit - len(out)))
    return out[:limit]


def note_text(finding: Finding) -> str:
    """The diagnosis as an exception note: a few plain lines, no colour."""
    lines = [f"dtype-doctor [{finding.code}] {finding.title}"]
    if finding.message:
        lines.append(f"  {finding.message}")
    if finding.location:
        lines.append(f"  at {finding.location.describe()}")
    intended = finding.data.get("intended")
    if isinstance(intended, dict) and intended.get("evidence"):
        said = f"  intended: {intended.get('dtype')}: {intended['evidence']}"
        lines.append(said + (f"; {intended['deliberate']}" if intended.get("deliberate") else ""))
    if finding.data.get("your_code"):
        lines.append(f"  your code: {finding.data['your_code']}")
    for o in finding.operands:
        shape = "x".join(map(str, o.shape)) if o.shape is not None else ""
        origin = o.origin.describe() if o.origin else ""
        lines.append(f"  {o.role:<8} {o.dtype or '?':<9} {shape:<14} <- {origin}")
        if o.origin:
            lines.extend(f"  {'':<34}{'  ' * depth}<- {c.describe()}" for depth, c in _chain(o.origin))
    width = terminal_width()
    folded = [piece for line in lines for piece in fold_prose_line(line, width, hang=4)]
    for fix in finding.fixes[:2]:
        folded += fold_prose_line(f"  fix: {fix.headline()}", width, hang=5)
        if fix.verification:
            folded += fold_prose_line(f"       ({fix.verification})", width)
        if fix.snippet:
            folded += [
                piece for s in fix.snippet.splitlines()[:3] for piece in fold_code_line(f"       {s}", width)
            ]
    return "\n".join(folded)


BRIEF = "(its root, the fix that cures it and the proof: in dtype-doctor's report below)"


def brief_note(finding: Finding) -> str:
    """The note under `dtype-doctor run`, whose report follows the traceback with the experiment's
    cure: the headline and the place, so that the diagnosis is printed once, with one first fix."""
    lines = [f"dtype-doctor [{finding.code}] {finding.title}"]
    if finding.location:
        lines.append(f"  at {finding.location.describe()}")
    lines.append(f"  {BRIEF}")
    width = terminal_width()
    return "\n".join(piece for line in lines for piece in fold_prose_line(line, width, hang=4))
