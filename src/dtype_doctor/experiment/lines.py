"""The root of a failure no finding explains, by experiment: which line of the user's, computed in
float32, cures the program.

A program that fails (its own assert on a symptom, a NaN check, an exception) while nothing
dtype-doctor recognised explains it has its root line searched by re-runs (experiment/search.py). The
root's fix is that line rewritten (its half operands `.float()`, a low dtype it asks for made
`torch.float32`, a `.half()` made `.float()`, autocast off around it), re-run like any edit. Every
re-run counts against the deadline; when it runs out the report says how far it got. No torch import.
"""

from __future__ import annotations

import ast
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..catalog import family_codes
from ..editing.finders import enclosing_function
from ..editing.fix_edits import shown_path
from ..editing.source import Edit, Source
from ..patching.verify import Command, Patched, attempt, replay
from ..remedies import cure
from ..report import Finding, Fix, Location, Severity
from .rewrite import keep_buffers, rewrite
from .search import Outcome, original, search, search_without


def finding(
    outcome: Outcome,
    code_of_program: int,
    fix: Fix | None,
) -> Finding:
    """The root line as a finding: where it is, what the experiment showed, its fix."""
    assert outcome.root is not None
    path, _, line = outcome.root["key"].rpartition(":")
    autocast = bool(outcome.root.get("autocast"))
    code = family_codes.LOW_PRECISION_UNDER_AUTOCAST if autocast else family_codes.FINITE_BUT_WRONG
    if outcome.nonfinite and not autocast:
        code = family_codes.NONFINITE_VALUES
    code = outcome.raised or code  # the error the program died of, its root found by the experiment
    how = (
        "under autocast, in its low dtype"
        if autocast
        else "in float32"
        if outcome.wide
        else "in float16/bfloat16"
    )
    alone = "alone" if outcome.alone else "together with the lines that ran before it"
    what = f"computes {how}, and computing it in {outcome.up} {alone} makes"
    if outcome.root.get("module_cast"):
        what = f"casts a module's float32 buffers to a low dtype with its parameters, and keeping them float32 {alone} makes"
    message = (
        f"your program failed (exit {code_of_program}) "
        f"{f'on a dtype error ({outcome.raised})' if outcome.raised else 'with no dtype error seen'}; {path}:{line} {what} "
        f"the program pass: of {outcome.candidates} low-precision line(s) of yours, {outcome.runs} re-run(s) "
        + ("found it where the precision is lost" if outcome.tried_alone else "bisected to this one")
    )
    if outcome.nonfinite:
        message += f"; left as it is, {outcome.nonfinite} makes inf/NaN from finite operands"
        if outcome.nonfinite_module:
            message += f" (in `{outcome.nonfinite_module}`)"
    module = outcome.root.get("module") or None
    if outcome.nonfinite_module and outcome.nonfinite == outcome.root["key"]:
        module = outcome.nonfinite_module  # where the symptom is made, of the modules the root line ran
    return Finding(
        code=code,
        title=f"The precision of this line is the root: in {outcome.up} the program passes",
        severity=Severity.ERROR,
        message=message,
        location=Location(file=path, line=int(line), module=module),
        fixes=[fix] if fix is not None else [],
        data={"experiment": {"runs": outcome.runs, "candidates": outcome.candidates, "alone": outcome.alone}},
    )


MAX_LINES_IN_A_FIX = 4
OTHER_ROOTS = 2  # roots tried after one whose edit did not cure (search_without)


def diagnose(
    command: Command,
    anchor: str,
    deadline: float,
    timeout: float,
    code_of_program: int,
    user_source: Callable[[str], Source | None],
    raised: str = "",
) -> tuple[Finding | None, Outcome]:
    """The line experiment, then its root's fix made and re-run: the root line's statement in
    float32 alone, else (when the cure needed the lines before it, a few) those lines too. The
    finding only when an edit's re-run cured the program (None else: `outcome.why` says why).
    `raised`: the family code of the dtype error the program died of, if it did."""
    outcome = search(command, anchor, deadline, timeout)
    outcome.raised = raised
    if outcome.root is None:
        return None, outcome
    trial = _Trial(command, anchor, timeout, user_source, outcome)
    where = outcome.root["key"]
    for _ in range(1 + OTHER_ROOTS):
        found = _root_fix(outcome, trial, code_of_program, deadline)
        if found is not None or outcome.why:
            return found, outcome
        if not search_without(outcome, command, anchor, deadline, timeout):
            break
    outcome.why = (
        outcome.why or f"{where} in {outcome.up} cures the program, but no edit of it that was re-run did"
    )
    return None, outcome


def _root_fix(outcome: Outcome, trial: _Trial, code_of_program: int, deadline: float) -> Finding | None:
    """The root line's fix (alone, else with the few lines before it), re-run: its finding when one
    cured; None else (`outcome.why` set when the budget ran out)."""
    assert outcome.root is not None
    tries = [outcome.prefix[-1:]]
    if 1 < len(outcome.prefix) <= MAX_LINES_IN_A_FIX:
        tries.append(outcome.prefix)
    for lines in tries:
        if time.monotonic() > deadline:
            outcome.why = "the budget ran out before the root line's edit was re-run"
            return None
        fix = _tried_fix(lines, trial)
        if fix is not None and fix.verified:
            outcome.alone = len(lines) == 1
            outcome.nonfinite, outcome.nonfinite_module = _makes_nonfinite(outcome)
            found = finding(outcome, code_of_program, fix)
            chosen = _chosen_fix(lines, trial, deadline)
            if chosen is not None:
                _add_chosen(found, *chosen, lines, trial)
            return found
    return None


def _add_chosen(
    found: Finding, site: dict[str, Any], fix: Fix, lines: list[dict[str, Any]], trial: _Trial
) -> None:
    """Where the dtype was chosen, as a fix of the root's finding: first (the finding located there)
    when float32 there widens nothing beyond the cure; after the line's own fix, which keeps more of
    the user's precision, when it also makes other lines of theirs, or a whole module, float32."""
    wider = _also_widens(site, lines, trial)
    whole = any(e.get("module_cast") for e in lines)  # the value a module-wide cast takes
    if wider or whole:
        found.fixes.append(fix)
        more = "the whole module" if whole else f"{wider} other line{'s' if wider != 1 else ''} of yours"
        found.message += (
            f"; the dtype it computes in is chosen at {shown_path(site['key'])} (`{site['expr']}`):"
            f" {trial.outcome.up} there makes it pass too, but also computes {more} in {trial.outcome.up}"
        )
        return
    path, _, line = site["key"].rpartition(":")
    found.fixes.insert(0, fix)
    same = _function_of(site["key"], trial) in {_function_of(e["key"], trial) for e in lines}
    module = found.location.module if found.location is not None and same else None
    found.location = Location(file=path, line=int(line), module=module)  # (its module, in the same method)
    found.message += (
        f"; the dtype it computes in is chosen at {path}:{line}"
        f" (`{site['expr']}`), and {trial.outcome.up} there alone makes it pass too"
    )
    found.root_cause = f"the dtype `{site['expr']}` chosen at {path}:{line}: {trial.outcome.up} there alone makes the program pass"


@dataclass
class _Trial:
    """What each edit the line experiment re-runs needs: the program, the folder its scratch copy
    mirrors, a re-run's time limit, the user's files, and the outcome that counts the re-runs."""

    command: Command
    anchor: str
    timeout: float
    user_source: Callable[[str], Source | None]
    outcome: Outcome

    def fix(self, src: Source, edits: list[Edit], title: str, why: str) -> Fix:
        """`edits` (with `import torch` where the file lacks it) re-run: the fix with its verdict."""
        from ..editing.fix_edits import small_diff, to_json
        from ..editing.source import apply

        if any("torch." in e.text for e in edits) and "import torch" not in src.text:
            edits = [Edit(src.path, 0, 0, f"import torch{src.newline}"), *edits]
        backend = Patched(
            {src.path: src.text}, lambda files: replay(files, self.command, self.anchor, timeout=self.timeout)
        )
        seen = attempt({src.path: apply(src.text, edits)}, backend)
        self.outcome.runs += 1
        ruff = [to_json(src, e) for e in edits]
        return cure(
            title,
            why,
            ruff,
            small_diff(ruff),
            seen.passed,
            f"verified: these edits, re-run: {seen.describe().removeprefix('re-run of the patched copy: ')}"
            if seen.passed
            else (seen.verdict.text if seen.verdict else "fails"),
        )


def _tried_fix(lines: list[dict[str, Any]], trial: _Trial) -> Fix | None:
    """The lines' statements rewritten in float32 (one file), re-run: the fix with its verdict."""
    path = lines[-1]["key"].rpartition(":")[0]
    src = trial.user_source(path)
    if src is None or any(e["key"].rpartition(":")[0] != path for e in lines):
        return None
    numbers = ", ".join(entry["key"].rpartition(":")[2] for entry in lines)
    up = trial.outcome.up
    title = f"Compute {os.path.basename(path)}:{numbers} in {up}"
    stmt = src.statement_at(_line(lines[0])) if len(lines) == 1 and lines[0].get("module_cast") else None
    kept = keep_buffers(src, stmt) if stmt is not None else None
    if kept is not None:
        title = f"Keep the float32 buffers float32 through the module-wide cast at {os.path.basename(path)}:{numbers}"
    edits = (
        [kept]
        if kept is not None
        else [
            e
            for entry in lines
            if (e := rewrite(src, _line(entry), entry, trial.outcome.keep, trial.outcome.wide))
        ]
    )
    if not edits:
        return None
    return trial.fix(
        src,
        edits,
        title,
        f"the experiment's cure: in {up} this makes the failing program pass",
    )


def _makes_nonfinite(outcome: Outcome) -> tuple[str, str]:
    """Of the lines the probe saw make inf/NaN from finite operands: the root line if it does, else
    the first that does, else "" (the symptom's name: non-finite values, not only wrong ones); with
    the module it was made in ("" when none is known)."""
    assert outcome.root is not None
    made = outcome.probed or []
    if not made:
        return "", ""
    raw = outcome.root.get("raw")
    entry = next((e for e in made if e["raw"] == raw), made[0])
    return entry["key"], str(entry.get("nonfinite_module") or "")


def _line(entry: dict[str, Any]) -> int:
    return int(entry["key"].rpartition(":")[2])


def _chosen_fix(
    lines: list[dict[str, Any]], trial: _Trial, deadline: float
) -> tuple[dict[str, Any], Fix] | None:
    """The decision one step before the cured lines: where the low dtype they name was chosen (the
    argument a caller passed, a variable's assignment), float32 there alone, re-run. The farthest
    site first (where the value was written); None when no site's edit cures."""
    cured = {e["key"] for e in lines}
    sites: list[dict[str, Any]] = []
    for entry in lines:
        for site in reversed(entry.get("chosen") or ()):
            if isinstance(site, dict) and site not in sites and site.get("key") not in cured:
                sites.append(site)
    for site in sites[:2]:
        if time.monotonic() > deadline:
            return None
        key = original(site["key"], trial.anchor)
        path, _, line = key.rpartition(":")
        src = trial.user_source(path)
        up = trial.outcome.up
        edit = _value_edit(src, int(line), str(site.get("expr", "")), up) if src is not None else None
        if src is None or edit is None:
            continue
        fix = trial.fix(
            src,
            [edit],
            f"Choose {up} where the dtype is chosen ({os.path.basename(path)}:{line})",
            f"the lines that compute in it take `{site['expr']}` from here; {up} here alone cures the program",
        )
        if fix.verified:
            return {**site, "key": key}, fix
    return None


def _also_widens(site: dict[str, Any], lines: list[dict[str, Any]], trial: _Trial) -> int:
    """How many low-precision lines outside the functions of the cured ones take their dtype from
    `site` too: what float32 at the site computes in float32 beyond the cure (the cured function's
    own other lines follow its dtype parameter, part of the one decision)."""
    cured = {_function_of(e["key"], trial) for e in lines}
    n = 0
    for entry in trial.outcome.low:
        key = original(entry["key"], trial.anchor)
        if _function_of(key, trial) in cured:
            continue
        sites = [s for s in entry.get("chosen") or () if isinstance(s, dict)]
        n += any(
            original(str(s.get("key")), trial.anchor) == site["key"] and s.get("expr") == site.get("expr")
            for s in sites
        )
    return n


def _function_of(key: str, trial: _Trial) -> tuple[str, int]:
    """(file, first line of the function holding the line; 0 at the top level)."""
    path, _, line = key.rpartition(":")
    src = trial.user_source(path)
    fn = enclosing_function(src, int(line)) if src is not None and line.isdigit() else None
    return path, fn.lineno if fn is not None else 0


def _value_edit(src: Source, line: int, expr: str, up: str = "float32") -> Edit | None:
    """`expr` on the statement at `line` (an argument passed, or an assignment's value) made
    `torch.float32`."""
    stmt = src.statement_at(line)
    if stmt is None or not expr:
        return None
    if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == expr for t in stmt.targets):
        if enclosing_function(src, line) is None:
            return None  # `dtype = torch.float16` at the top: the script's precision, not this value's
        node: ast.AST | None = stmt.value
    else:
        node = next(
            (
                n
                for n in ast.walk(stmt)
                if isinstance(n, ast.expr)
                and not isinstance(getattr(n, "ctx", None), ast.Store)
                and ast.unparse(n) == expr
            ),
            None,
        )
    if node is None:
        return None
    start, end = src.span(node)
    return Edit(src.path, start, end, f"torch.{up}")
